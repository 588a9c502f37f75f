//! Carrying out the steps of a fix under the root (see the module above).
