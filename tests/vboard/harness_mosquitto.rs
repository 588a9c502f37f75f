//! A mosquitto on the host that the guests reach through qemu's forward.

use super::*;

// ---------------------------------------------------------------------------------------------
// A broker on loopback.

pub struct Mosquitto {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Mosquitto {
    /// A port on 127.0.0.1 that was free a moment ago.
    pub fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .expect("bind 127.0.0.1:0")
            .local_addr()
            .expect("addr")
            .port()
    }

    pub fn start() -> Option<Mosquitto> {
        Self::start_on(Self::free_port())
    }

    /// mosquitto on 127.0.0.1:PORT only, anonymous, no persistence; waits until it accepts.
    pub fn start_on(port: u16) -> Option<Mosquitto> {
        let [bin] = common::tools(["mosquitto"], "the MQTT broker; Debian package mosquitto")?;
        let dir = tempfile::Builder::new()
            .prefix("vboard-mosquitto-")
            .tempdir()
            .expect("temp dir");
        let conf = dir.path().join("mosquitto.conf");
        fs::write(&conf, format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest stderr\nlog_type all\n"))
            .expect("write mosquitto.conf");
        let log = fs::File::create(dir.path().join("mosquitto.log")).expect("log");
        let child = Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("fd"))
            .stderr(log)
            .spawn()
            .expect("start mosquitto");
        let mut m = Mosquitto {
            port,
            child: Some(child),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(st) = m
                .child
                .as_mut()
                .and_then(|c| c.try_wait().expect("poll mosquitto"))
            {
                panic!("mosquitto exited ({st}) on port {port}:\n{}", m.log());
            }
            assert!(
                Instant::now() < deadline,
                "mosquitto did not listen on {port}:\n{}",
                m.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(m)
    }

    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        self.stop();
    }
}
