//! The bottom layer: utilities every other module may use and that use nothing above them —
//! the operator log ([`log`]), the process shape of the long-running modes ([`runtime`]),
//! values kept out of logs ([`secret`]), terminal-safe output ([`term`]), UTC civil time
//! ([`time`]) and the one way a child process is run ([`process`]).

pub mod log;
pub mod process;
pub mod runtime;
pub mod secret;
pub mod term;
pub mod time;
