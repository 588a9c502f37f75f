//! Pure parsers: text in, typed values out. None of them opens a file, and none panics on any
//! input (a property test feeds each of them arbitrary bytes). Probes call them on file contents
//! read through [`crate::root::SysRoot`].

pub mod bootfile;
pub mod buddyinfo;
pub mod cma_size;
pub mod cmdline;
pub mod compat;
pub mod containerlog;
pub mod devicetree;
pub mod dpkg;
pub mod gguf;
pub mod hef;
pub mod kernel;
pub mod kv;
pub mod limits;
pub mod llamalog;
pub mod llmargs;
pub mod logline;
pub mod meminfo;
pub mod numa;
pub mod nvsmi;
pub mod size;
pub mod throughput;
pub mod version;
pub mod vmstat;
pub mod workload;
