//! The bottom layer: utilities every other module may use and that use nothing above them —
//! whether this process runs in a container ([`container`]),
//! the operator log ([`log`]), how far apart two names are ([`distance`]), the process shape of
//! the long-running modes ([`runtime`]), values kept out of logs ([`secret`]) and secrets taken
//! out of text ([`redact`]), terminal-safe output ([`term`]), UTC civil time ([`time`]), strict
//! UTF-8 for configuration text ([`text`]) and the one way a child process is run ([`process`]).

pub mod container;
pub mod distance;
pub mod hostfile;
pub mod log;
pub mod process;
pub mod redact;
pub mod runtime;
pub mod secret;
pub mod term;
pub mod text;
pub mod time;
