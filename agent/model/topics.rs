//! Every MQTT topic the agent uses, built and parsed in one place (docs/reference.md "MQTT topics and payloads"):
//! `<root>/<board>/availability`, `<root>/<board>/status`, `<root>/<board>/cmd/<action>/<cmd_id>`
//! and the fleet-wide `<root>/all/cmd/<action>/<cmd_id>`.

use super::action::ActionKind;

/// The board id that addresses every board.
pub const ALL: &str = "all";

/// `<root>/<board>/availability` (retained `online` / `offline`).
pub fn availability(root: &str, board: &str) -> String {
    format!("{root}/{board}/availability")
}

/// `<root>/<board>/status` (retained report JSON).
pub fn status(root: &str, board: &str) -> String {
    format!("{root}/{board}/status")
}

/// `<root>/<board>/cmd/<action>/<cmd_id>`.
pub fn command(root: &str, board: &str, action: &str, cmd_id: &str) -> String {
    format!("{root}/{board}/cmd/{action}/{cmd_id}")
}

/// `<root>/<board>/cmd/`: the prefix of every answer the board publishes.
pub fn answers_prefix(root: &str, board: &str) -> String {
    format!("{root}/{board}/cmd/")
}

/// The subscriptions a board needs for its commands: its own and the fleet-wide ones.
pub fn command_filters(root: &str, board: &str) -> [String; 2] {
    [
        format!("{root}/{board}/cmd/+/+"),
        format!("{root}/{ALL}/cmd/+/+"),
    ]
}

/// A parsed command topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandTopic {
    /// Board segment (a board id or `all`).
    pub board: String,
    /// Action segment, as it came.
    pub action: String,
    /// The action segment parsed (`None`: no action the agent knows).
    pub kind: Option<ActionKind>,
    /// Command id segment.
    pub cmd_id: String,
}

impl CommandTopic {
    /// The command topic of `board`, `action` and `cmd_id`, its action parsed once.
    pub fn new(board: &str, action: &str, cmd_id: &str) -> CommandTopic {
        CommandTopic {
            board: board.to_string(),
            action: action.to_string(),
            kind: action.parse().ok(),
            cmd_id: cmd_id.to_string(),
        }
    }
}

/// Parses `<root>/<board>/cmd/<action>/<cmd_id>`; `None` for any other shape.
pub fn parse_command(root: &str, topic: &str) -> Option<CommandTopic> {
    let rest = topic.strip_prefix(root)?.strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [board, "cmd", action, cmd_id]
            if !board.is_empty() && !action.is_empty() && !cmd_id.is_empty() =>
        {
            Some(CommandTopic::new(board, action, cmd_id))
        }
        _ => None,
    }
}

/// Parses `<root>/<board>/<leaf>` and returns the board (for `fleet watch`).
pub fn parse_board_leaf<'a>(root: &str, topic: &'a str, leaf: &str) -> Option<&'a str> {
    let rest = topic.strip_prefix(root)?.strip_prefix('/')?;
    let (board, l) = rest.split_once('/')?;
    (l == leaf && !board.is_empty()).then_some(board)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_parse() {
        let t = command("npu-fleet", "rock5b-01", "compact", "c-1");
        assert_eq!(t, "npu-fleet/rock5b-01/cmd/compact/c-1");
        let p = parse_command("npu-fleet", &t).unwrap();
        assert_eq!(
            (p.board.as_str(), p.action.as_str(), p.cmd_id.as_str()),
            ("rock5b-01", "compact", "c-1")
        );
        assert_eq!(parse_command("npu-fleet", "npu-fleet/x/status"), None);
        assert_eq!(parse_command("npu-fleet", "other/x/cmd/a/b"), None);
        assert_eq!(parse_command("npu-fleet", "npu-fleet/x/cmd/a/b/c"), None);
        assert_eq!(
            parse_board_leaf("npu-fleet", "npu-fleet/b1/status", "status"),
            Some("b1")
        );
        assert_eq!(
            command_filters("r", "b"),
            ["r/b/cmd/+/+".to_string(), "r/all/cmd/+/+".to_string()]
        );
    }
}
