//! `release_npu`: ask a local hailo-ollama (port from its config, default 8000) to unload its
//! model(s), over a minimal HTTP/1.1 client to 127.0.0.1 (no HTTP library for two requests).

use crate::model::action::ActionOutcome;
use crate::root::SysRoot;
use serde_json::{json, Value};
use std::time::Duration;

/// hailo-ollama's port: `server.port` in its config (`/etc/xdg/hailo-ollama/hailo-ollama.json`),
/// else its default 8000.
pub fn hailo_ollama_port(root: &SysRoot) -> u16 {
    root.read_string("/etc/xdg/hailo-ollama/hailo-ollama.json")
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v.pointer("/server/port").and_then(Value::as_u64))
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(8000)
}

/// One HTTP/1.1 request to 127.0.0.1 (hailo-ollama listens on localhost); returns (status, body).
fn http_local(port: u16, method: &str, path: &str, body: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("hailo-ollama on 127.0.0.1:{port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut resp = Vec::new();
    s.take(1 << 20)
        .read_to_end(&mut resp)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&resp).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("not an HTTP response")?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// Asks a local hailo-ollama to unload its model(s): `POST /api/generate` with `keep_alive: 0`
/// and no prompt (its unload form), for the named model or every model `/api/ps` lists.
pub fn release_npu(root: &SysRoot, model: Option<String>) -> ActionOutcome {
    let port = hailo_ollama_port(root);
    let models = match model {
        Some(m) => vec![m],
        None => match http_local(port, "GET", "/api/ps", "") {
            Ok((200, body)) => serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v.get("models").and_then(Value::as_array).cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|m| {
                    m.get("name")
                        .or_else(|| m.get("model"))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .collect(),
            Ok((code, _)) => {
                return ActionOutcome::failed(format!("GET /api/ps answered {code}"), Value::Null)
            }
            Err(e) => return ActionOutcome::failed(e, Value::Null),
        },
    };
    let mut unloaded = Vec::new();
    for m in &models {
        let body = json!({"model": m, "keep_alive": 0}).to_string();
        match http_local(port, "POST", "/api/generate", &body) {
            Ok((200, _)) => unloaded.push(m.clone()),
            Ok((code, b)) => {
                return ActionOutcome::failed(
                    format!(
                        "unloading {m}: HTTP {code}: {}",
                        b.chars().take(200).collect::<String>()
                    ),
                    json!({"unloaded": unloaded}),
                )
            }
            Err(e) => return ActionOutcome::failed(e, json!({"unloaded": unloaded})),
        }
    }
    ActionOutcome::succeeded(
        format!("unloaded {} model(s)", unloaded.len()),
        json!({"port": port, "unloaded": unloaded}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, t) in files {
            let path = d.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, t).unwrap();
        }
        d
    }

    #[test]
    fn port_from_hailo_ollama_config_else_8000() {
        let d = tree(&[(
            "/etc/xdg/hailo-ollama/hailo-ollama.json",
            r#"{"server":{"port":8123}}"#,
        )]);
        assert_eq!(hailo_ollama_port(&SysRoot::new(d.path())), 8123);
        let d = tree(&[("/etc/xdg/hailo-ollama/hailo-ollama.json", "{}")]);
        assert_eq!(hailo_ollama_port(&SysRoot::new(d.path())), 8000);
    }

    /// A one-shot HTTP server on 127.0.0.1 answering each request from `answers`, in order.
    fn serve(answers: Vec<&'static str>) -> u16 {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for a in answers {
                let (mut s, _) = l.accept().unwrap();
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(a.as_bytes());
            }
        });
        port
    }

    #[test]
    fn unloads_every_listed_model() {
        let port = serve(vec![
            "HTTP/1.1 200 OK\r\n\r\n{\"models\":[{\"name\":\"qwen2:1.5b\"}]}",
            "HTTP/1.1 200 OK\r\n\r\n{}",
        ]);
        let cfg = format!(r#"{{"server":{{"port":{port}}}}}"#);
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("etc/xdg/hailo-ollama");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("hailo-ollama.json"), cfg).unwrap();
        let o = release_npu(&SysRoot::new(d.path()), None);
        assert!(o.ok && o.ran, "{o:?}");
        assert_eq!(o.details["unloaded"], json!(["qwen2:1.5b"]));
        assert_eq!(o.message, "unloaded 1 model(s)");
    }

    #[test]
    fn an_http_error_fails_with_the_status() {
        let port = serve(vec!["HTTP/1.1 500 Internal\r\n\r\nboom"]);
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("etc/xdg/hailo-ollama");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(
            p.join("hailo-ollama.json"),
            format!(r#"{{"server":{{"port":{port}}}}}"#),
        )
        .unwrap();
        let o = release_npu(&SysRoot::new(d.path()), Some("m".into()));
        assert!(!o.ok && o.ran);
        assert!(
            o.message.starts_with("unloading m: HTTP 500"),
            "{}",
            o.message
        );
    }
}
