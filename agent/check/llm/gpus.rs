//! The GPUs' memory a command line is judged against: the free memory the server printed when it
//! started (its log's `ggml_cuda_init` device lines, the right figure for a load), else
//! `nvidia-smi`'s.

use super::serverlog::SourceLog;
use crate::model::llm::LlmProbe;
use crate::parse::nvsmi::GpuMemory;
use crate::root::ReadError;

/// GPU memory and where it was read.
pub(super) struct GpuView {
    /// One entry per GPU.
    pub gpus: Vec<GpuMemory>,
    /// The command or file, or the log and its line.
    pub source: String,
    /// The figures are the server's own, from before it loaded the model.
    pub at_start: bool,
}

/// The server's start-time figures when its log has them for every device, else nvidia-smi's.
pub(super) fn view(l: &LlmProbe, log: Option<&SourceLog>) -> Result<GpuView, ReadError> {
    if let Some(g) = log {
        let devs = &g.run.devices;
        if !devs.is_empty() && devs.iter().all(|d| d.free_bytes.is_some()) {
            let gpus = devs
                .iter()
                .map(|d| GpuMemory {
                    index: d.index,
                    name: d.name.clone(),
                    total_bytes: d.total_bytes.unwrap_or(0),
                    used_bytes: None,
                    free_bytes: d.free_bytes.unwrap_or(0),
                })
                .collect();
            return Ok(GpuView {
                gpus,
                source: g.path.clone(),
                at_start: true,
            });
        }
    }
    l.gpus.clone().map(|gpus| GpuView {
        gpus,
        source: l.gpu_source.clone(),
        at_start: false,
    })
}

/// How many GPUs the host has, when known.
pub(super) fn count(l: &LlmProbe, log: Option<&SourceLog>) -> Option<usize> {
    match (&l.gpus, log) {
        (Ok(g), _) => Some(g.len()),
        (Err(_), Some(g)) if !g.run.devices.is_empty() => Some(g.run.devices.len()),
        _ => None,
    }
}
