//! Helpers the test binaries share: mosquitto, boards and the agent process (`mqtt`), other
//! brokers (`brokers`), a fault-injecting MQTT proxy (`proxy`), journal files (`journal`) and
//! GGUF files (`gguf`). Each binary uses a part of them, so unused items are no warning here.
#![allow(dead_code)]

pub mod brokers;
pub mod gguf;
pub mod journal;
pub mod mqtt;
pub mod proxy;
