//! The `NPU_AGENT_*` variables of the process environment, read without assuming UTF-8: an
//! unrelated variable in another encoding is ignored, one of ours is a config error.

use super::ConfigError;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

/// Prefix of the config variables.
const PREFIX: &[u8] = b"NPU_AGENT_";

/// The `NPU_AGENT_*` variables of this process as `(name, value)`.
///
/// Errors: a [`ConfigError`] naming the variable (never its bytes) whose name or value is not
/// UTF-8.
pub fn agent_env() -> Result<Vec<(String, String)>, ConfigError> {
    agent_vars(std::env::vars_os())
}

/// [`agent_env`] over any list of variables.
pub fn agent_vars(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    for (k, v) in vars {
        if !k.as_bytes().starts_with(PREFIX) {
            continue;
        }
        let Some(name) = k.to_str() else {
            return Err(not_utf8(format!(
                "an NPU_AGENT_ variable ({} bytes of name)",
                k.len()
            )));
        };
        let Some(value) = v.to_str() else {
            return Err(not_utf8(name.to_string()));
        };
        out.push((name.to_string(), value.to_string()));
    }
    Ok(out)
}

fn not_utf8(source: String) -> ConfigError {
    ConfigError {
        source,
        line: None,
        message: "is not UTF-8 text".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    fn os(b: &[u8]) -> OsString {
        OsString::from_vec(b.to_vec())
    }

    #[test]
    fn unrelated_non_utf8_variables_are_ignored() {
        let vars = vec![
            (os(b"LANG_X"), os(b"\xff\xfe")),
            (os(b"NPU_AGENT_BOARD_ID"), os(b"b1")),
        ];
        assert_eq!(
            agent_vars(vars).unwrap(),
            vec![("NPU_AGENT_BOARD_ID".to_string(), "b1".to_string())]
        );
    }

    #[test]
    fn one_of_ours_in_another_encoding_is_named_not_echoed() {
        let e =
            agent_vars(vec![(os(b"NPU_AGENT_MQTT_URL"), os(b"mqtt://\xffsecret"))]).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("NPU_AGENT_MQTT_URL") && text.contains("not UTF-8"),
            "{text}"
        );
        assert!(!text.contains("secret"), "{text}");
        let e = agent_vars(vec![(os(b"NPU_AGENT_\xff"), os(b"x"))]).unwrap_err();
        assert!(e.to_string().contains("bytes of name"), "{e}");
    }
}
