//! Workload failures whose lines name their cause, decided at `fail` in `npu.workload` (the one
//! place for these decisions; docs/user-guide.md, "Checks"):
//!
//! - a model, or the app, built for another chip or runtime release: HailoRT's `HEF arch` and
//!   `HAILO_INVALID_HEF(26)`, rkllm-runtime's `model version is too old` and `target_platform does
//!   not match`, librknnrt's `info_len(372) < sizeof(rknn_tensor_attr)(376)`. The finding names
//!   the model file where the log does. (`Invalid RKNN model version`, a runtime older than the
//!   model, stays with `rknpu.runtime_library`: there the runtime is what to change.)
//! - a Hailo another process holds: `HAILO_OUT_OF_PHYSICAL_DEVICES(74)` while the chip is bound to
//!   the right driver, with the processes that have its node open and whether HailoRT's
//!   multi-process service runs. (With no usable binding, status 74 stays `hailo.driver_binding`'s.)

use super::{Block, ID};
use crate::check::{Ctx, Finding, Status};
use crate::parse::compat::{compat, AppSoc};
use crate::parse::logline::LogEvent;
use crate::parse::workload::{model_file, model_mismatch, ModelMismatch};

/// HailoRT's vendor id on PCI.
const HAILO_VENDOR: u16 = 0x1e60;

/// The SoC-support rule of the catalog app whose log holds `file`, and the SoC string the app
/// reads from this board, when the app refuses it (`catalog/compat.toml`, `[[app_soc]]`).
fn refused_soc(ctx: &Ctx<'_>, file: &str) -> Option<(&'static AppSoc, String)> {
    let app = ctx
        .snap
        .workloads
        .workloads
        .iter()
        .find(|w| w.logs.iter().any(|l| l == file))?
        .app
        .clone()?;
    let compatible = ctx.snap.identity.compatible.as_ref().ok()?;
    compat().app_soc.iter().find_map(|t| {
        let soc = t.soc_of(compatible)?;
        (t.app == app && !t.accepts(&soc)).then_some((t, soc))
    })
}

/// Splits the failure blocks into the findings of the known causes and the blocks left.
pub(super) fn decide(ctx: &Ctx<'_>, blocks: Vec<Block>) -> (Vec<Finding>, Vec<Block>) {
    let held_possible = hailo_bound_right(ctx);
    let (mut model, mut held, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    let mut soc: Vec<(Block, &'static AppSoc, String)> = Vec::new();
    for b in blocks {
        // The app names the SoC it refuses in its own words: its list is the cause.
        if let Some((t, s)) = refused_soc(ctx, &b.file)
            .filter(|(_, s)| b.lines.iter().any(|(_, l)| l.contains(s.as_str())))
        {
            soc.push((b, t, s));
            continue;
        }
        if b.lines.iter().any(|(_, t)| model_mismatch(t).is_some()) {
            model.push(b);
        } else if held_possible
            && b.lines
                .iter()
                .any(|(_, t)| t.contains("HAILO_OUT_OF_PHYSICAL_DEVICES"))
        {
            held.push(b);
        } else {
            rest.push(b);
        }
    }
    let mut out = Vec::new();
    if let Some((_, t, s)) = soc.last() {
        let blocks: Vec<Block> = soc.iter().map(|(b, _, _)| b.clone()).collect();
        out.push(soc_finding(ctx, t, s, Some(&blocks)));
    }
    if !model.is_empty() {
        out.push(model_finding(ctx, &model));
    }
    if !held.is_empty() {
        out.push(held_finding(ctx, &held));
    }
    (out, rest)
}

/// The bound driver of a Hailo on PCI, when it is one of the profile's drivers.
fn hailo_bound_right(ctx: &Ctx<'_>) -> bool {
    let drivers = &ctx.profile.npu.drivers;
    ctx.snap.pci.as_ref().is_ok_and(|devs| {
        devs.iter().any(|d| {
            d.vendor == HAILO_VENDOR
                && d.driver
                    .as_ref()
                    .is_some_and(|b| drivers.iter().any(|x| x.eq_ignore_ascii_case(b)))
        })
    })
}

/// The last model file the block's log names at or before the block's last line.
fn named_model(ctx: &Ctx<'_>, b: &Block) -> Option<String> {
    let log = ctx.snap.logs.iter().find(|l| l.path == b.file)?;
    log.lines
        .iter()
        .take(b.last())
        .rev()
        .find_map(|l| model_file(l))
}

/// The runtime version a log line reports (`rkllm-runtime version: 1.0.1`), the last one.
fn logged_runtime(ctx: &Ctx<'_>, rkllm: bool) -> Option<String> {
    ctx.logs
        .host_pick(|e| match e {
            LogEvent::RkllmRuntimeVersion { version } if rkllm => Some(version.to_string()),
            LogEvent::RknnRuntimeVersion { version } if !rkllm => Some(version.to_string()),
            _ => None,
        })
        .pop()
        .map(|(_, v)| v)
}

fn model_finding(ctx: &Ctx<'_>, blocks: &[Block]) -> Finding {
    let kinds: Vec<ModelMismatch> = blocks
        .iter()
        .flat_map(|b| b.lines.iter().filter_map(|(_, t)| model_mismatch(t)))
        .collect();
    let file = blocks.iter().rev().find_map(|b| named_model(ctx, b));
    let (summary, remedy) = model_words(ctx, &kinds, file.as_deref());
    let mut f = Finding::new(ID, Status::Fail, summary).remedy(remedy);
    if let Some(m) = &file {
        f = f.observed("model_file", m.clone());
    }
    with_lines(f, blocks)
}

/// The summary and the remedy for a model built for another target.
fn model_words(ctx: &Ctx<'_>, kinds: &[ModelMismatch], file: Option<&str>) -> (String, String) {
    let named = |default: &str| file.map(str::to_string).unwrap_or_else(|| default.into());
    let soc = ctx
        .profile
        .npu
        .chip
        .split_whitespace()
        .next()
        .unwrap_or("this SoC")
        .to_ascii_lowercase();
    if let Some(ModelMismatch::HefArch { device, hef }) = kinds
        .iter()
        .find(|k| matches!(k, ModelMismatch::HefArch { .. }))
    {
        let arch = device.to_ascii_lowercase();
        return (
            format!("the model was compiled for another chip: HailoRT refuses {} (HEF arch {hef}, device arch {device}; HAILO_INVALID_HEF, 26)", named("the HEF")),
            format!("use a build of {} compiled for {arch}: compile it again with the Hailo Dataflow Compiler's --hw-arch {arch}, or download the model's {arch} build (the model zoo's, or the app's model for this chip); nothing on the host needs to change", named("the model")),
        );
    }
    if kinds.contains(&ModelMismatch::HefRefused) {
        return (
            format!("HailoRT refuses the model {} (HAILO_INVALID_HEF, 26): it was compiled for another chip, or by a Dataflow Compiler newer than this HailoRT", named("(the HEF)")),
            format!("compile {} again for the {} with the Dataflow Compiler release that matches this HailoRT, or download the build made for this chip and release", named("the model"), ctx.profile.npu.chip),
        );
    }
    if let Some(ModelMismatch::RknnAttrSize {
        app_bytes,
        runtime_bytes,
    }) = kinds
        .iter()
        .find(|k| matches!(k, ModelMismatch::RknnAttrSize { .. }))
    {
        let rt = logged_runtime(ctx, false)
            .map(|v| format!(" {v}"))
            .unwrap_or_default();
        let loading = file.map(|m| format!(" (loading {m})")).unwrap_or_default();
        return (
            format!("the app was built against another release's rknn_api.h than the librknnrt{rt} it loads{loading}: rknn_query's info_len({app_bytes}) < sizeof(rknn_tensor_attr)({runtime_bytes})"),
            format!("rebuild the app against the rknn_api.h of the installed librknnrt{rt} (the include directory of the same rknn-toolkit2 release), or install the librknnrt release whose header the app was built with; the model and the kernel are not the cause"),
        );
    }
    let rt = logged_runtime(ctx, true);
    let mut why = Vec::new();
    if kinds.contains(&ModelMismatch::RkllmModelTooOld) {
        why.push("it was converted by an older rkllm-toolkit (\"The model version is too old\")");
    }
    if kinds.contains(&ModelMismatch::RkllmTargetPlatform) {
        why.push("for another target platform (\"target_platform does not match\")");
    }
    let runtime = rt
        .as_ref()
        .map(|v| format!("rkllm-runtime {v}"))
        .unwrap_or_else(|| "rkllm-runtime".into());
    (
        format!(
            "{runtime} refuses the model {}: {}",
            named("(the .rkllm file)"),
            why.join(", ")
        ),
        format!(
            "convert {} again with the rkllm-toolkit of the same release as {runtime}, with target_platform='{soc}' (or download a build made for that release), or run the runtime release the model was made for",
            named("the model")
        ),
    )
}

fn held_finding(ctx: &Ctx<'_>, blocks: &[Block]) -> Finding {
    let facts = &ctx.snap.stack;
    let users: Vec<_> = facts
        .npu_users
        .iter()
        .filter(|u| u.device.starts_with("/dev/hailo") || u.device.starts_with("/dev/h1x-"))
        .collect();
    let holders: Vec<String> = users
        .iter()
        .map(|u| {
            let name = if u.cmdline.is_empty() {
                &u.comm
            } else {
                &u.cmdline
            };
            format!("pid {} ({name})", u.pid)
        })
        .collect();
    let device = users
        .first()
        .map(|u| u.device.clone())
        .unwrap_or_else(|| "/dev/hailo0".into());
    let who = if holders.is_empty() {
        let blind = match facts.npu_users_unreadable {
            0 => String::new(),
            n => format!("; the open files of {n} process(es) could not be read"),
        };
        format!("no process with {device} open was found now (it may have exited since){blind}")
    } else {
        format!("{device} is open in {}", holders.join(", "))
    };
    let genai = genai_on_hailo10h(ctx);
    let service = match facts.hailort_service_pid {
        _ if genai.is_some() => "a GenAI model runs on it, which HailoRT serves in one process only".into(),
        Some(pid) => format!("HailoRT's multi-process service runs (hailort_service, pid {pid}), but only apps that open the device through it share the chip"),
        None => "HailoRT's multi-process service (hailort_service) is not running, so one process at a time owns the chip".into(),
    };
    let summary = format!(
        "another process holds the Hailo: HailoRT found no free device (HAILO_OUT_OF_PHYSICAL_DEVICES, 74) while the chip is bound to the right driver; {who}; {service}"
    );
    let pids = if holders.is_empty() {
        String::new()
    } else {
        format!(" ({})", holders.join(", "))
    };
    let remedy = if let Some(genai) = genai {
        format!("let one process own the Hailo-10H: {genai} runs a GenAI model, which HailoRT serves in one process only (its multi-process service does not share GenAI models); stop the other app that holds {device}{pids}, or have {genai} unload its model first (npu-agent release_npu) and start the other app after")
    } else if ctx.stack.systemd == Some(false) {
        format!("only one add-on or container can use the Hailo at a time: stop the other one that uses it{pids}, or turn its Hailo detector off; sharing the chip needs every app to open it through HailoRT's multi-process service")
    } else {
        format!("let one process own the Hailo: stop the other app that holds {device}{pids} (sudo fuser -v {device} lists them), or share the chip through HailoRT's multi-process service: sudo systemctl enable --now hailort.service, and open the device in every app with multi_process_service enabled, all on one HailoRT release")
    };
    let mut f = Finding::new(ID, Status::Fail, summary)
        .remedy(remedy)
        .observed("holders", holders)
        .observed("hailort_service", facts.hailort_service_pid.is_some());
    for u in &users {
        f = f.evidence(&u.source, None, &u.device);
    }
    with_lines(f, blocks)
}

/// An app that refuses this board's SoC string although the NPU is one it supports under
/// another name (Frigate's RKNN detector and `rk3588s`, BR-65): with the app's failure lines
/// (`fail`), or predicted from the app's presence and its NPU part (`warn`).
pub(super) fn soc_finding(
    ctx: &Ctx<'_>,
    t: &AppSoc,
    soc: &str,
    blocks: Option<&[Block]>,
) -> Finding {
    let w = ctx
        .snap
        .workloads
        .workloads
        .iter()
        .find(|w| w.app.as_deref() == Some(t.app.as_str()));
    let app = w.map(|w| w.label()).unwrap_or_else(|| t.app.clone());
    let container = w
        .filter(|w| w.in_container())
        .map(|w| w.name.clone())
        .unwrap_or_else(|| t.app.clone());
    let same = t
        .same_npu
        .get(soc)
        .map(|s| {
            format!(
                "; the {} has the same NPU as the {} and runs its models",
                soc.to_ascii_uppercase(),
                s.to_ascii_uppercase()
            )
        })
        .unwrap_or_default();
    let (status, verb) = match blocks {
        Some(_) => (Status::Fail, "refuses"),
        None => (Status::Warn, "will refuse"),
    };
    let mut f = Finding::new(
        ID,
        status,
        format!(
            "{app}: its {} {verb} this board's SoC: it reads {soc:?} from /proc/device-tree/compatible and accepts only {}{same}; the NPU itself is not at fault",
            t.part,
            t.supported.join(", ")
        ),
    )
    .observed("app_soc", soc.to_string())
    .observed("app_supported_socs", t.supported.clone())
    .observed("compat_source", t.source.clone())
    .remedy(t.remedy_for(soc, &container));
    if let Ok(c) = &ctx.snap.identity.compatible {
        f.push_evidence("/proc/device-tree/compatible", None, &c.join(" "));
    }
    match blocks {
        Some(b) => with_lines(f, b),
        None => f,
    }
}

/// A catalog app found on this board whose SoC list refuses the board, before it fails: its
/// part that checks the SoC shows (a word in its log, or its image), no failure line yet.
pub(super) fn predicted_soc(ctx: &Ctx<'_>) -> Option<Finding> {
    let compatible = ctx.snap.identity.compatible.as_ref().ok()?;
    for w in &ctx.snap.workloads.workloads {
        let Some(app) = &w.app else { continue };
        for t in compat().app_soc.iter().filter(|t| &t.app == app) {
            let Some(soc) = t.soc_of(compatible).filter(|s| !t.accepts(s)) else {
                continue;
            };
            let image = match &w.place {
                crate::model::workload::Place::Container { image, .. } => image.clone(),
                _ => String::new(),
            };
            let in_image = t.image_marks.iter().any(|m| image.contains(m.as_str()));
            let in_log = ctx.snap.logs.iter().any(|l| {
                w.logs.contains(&l.path)
                    && l.lines.iter().any(|line| {
                        let lower = line.to_ascii_lowercase();
                        t.marks.iter().any(|m| lower.contains(m.as_str()))
                    })
            });
            if in_image || in_log {
                return Some(soc_finding(ctx, t, &soc, None));
            }
        }
    }
    None
}

/// The GenAI workload on a Hailo-10H (hailo-ollama, a process or package of the GenAI model
/// zoo), by label: there the chip cannot be shared through HailoRT's multi-process service.
pub(crate) fn genai_on_hailo10h(ctx: &Ctx<'_>) -> Option<String> {
    if ctx.profile.npu.generation != Some(5) {
        return None;
    }
    let genai_word = |s: &str| {
        let l = s.to_ascii_lowercase();
        ["ollama", "genai", "gen_ai", "gen-ai", "llm", "vlm"]
            .iter()
            .any(|w| l.contains(w))
    };
    if let Some(w) = ctx
        .snap
        .workloads
        .workloads
        .iter()
        .find(|w| w.app.as_deref() == Some("hailo-ollama") || genai_word(&w.name))
    {
        return Some(w.label());
    }
    if let Some(u) = ctx
        .snap
        .stack
        .npu_users
        .iter()
        .find(|u| genai_word(&u.cmdline) || genai_word(&u.comm))
    {
        return Some(format!("{} (pid {})", u.comm, u.pid));
    }
    let zoo = ctx
        .snap
        .dpkg
        .as_ref()
        .ok()?
        .iter()
        .find(|p| p.is_installed() && ctx.profile.packages.genai.contains(&p.name))?;
    Some(format!(
        "the GenAI model zoo's app ({} installed)",
        zoo.name
    ))
}

/// The architectures a Hailo chip on PCI can be (the Hailo-8 and -8L share one id).
fn device_archs(device: u16) -> &'static [&'static str] {
    match device {
        0x45c4 => &["HAILO10H"],
        0x2864 => &["HAILO8", "HAILO8L"],
        _ => &[],
    }
}

/// A HEF a workload names whose header says it was compiled for a chip this board's Hailo
/// cannot be, before HailoRT refuses it (`catalog/compat.toml`, `[[hef_arch]]`).
pub(super) fn predicted_hef(ctx: &Ctx<'_>) -> Option<Finding> {
    let dev = ctx
        .snap
        .pci
        .as_ref()
        .ok()?
        .iter()
        .find(|d| d.vendor == HAILO_VENDOR)?;
    let archs = device_archs(dev.device);
    if archs.is_empty() {
        return None;
    }
    ctx.snap.workloads.models.iter().find_map(|m| {
        let h = m.hef.as_ref().ok()?;
        let refused = archs
            .iter()
            .all(|a| compat().hef_runs_on(&h.hw_arch, a) == Some(false));
        if !refused {
            return None;
        }
        let want = archs.join(" or ").to_ascii_lowercase();
        Some(
            Finding::new(
                ID,
                Status::Warn,
                format!(
                    "{} names the model {}, compiled for {} (its HEF header{}), which this {} cannot run: HailoRT will refuse it (HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE)",
                    m.workload,
                    m.path,
                    h.hw_arch,
                    h.sdk_version
                        .as_ref()
                        .map(|v| format!(", Dataflow Compiler {v}"))
                        .unwrap_or_default(),
                    super::super::hailo_chip_name(dev.device)
                ),
            )
            .observed("model_file", m.path.clone())
            .observed("hef_hw_arch", h.hw_arch.clone())
            .evidence(&m.path, None, &format!("HEF header: hw_arch {}", h.hw_arch))
            .remedy(format!(
                "use the build of the model compiled for {want} (the Dataflow Compiler's --hw-arch {}, or the model zoo's {want} build); nothing on the host needs to change",
                archs[archs.len() - 1].to_ascii_lowercase()
            )),
        )
    })
}

/// Adds every line of `blocks` as evidence.
fn with_lines(mut f: Finding, blocks: &[Block]) -> Finding {
    for b in blocks {
        for (n, t) in &b.lines {
            f.push_evidence(&b.file, b.numbered.then_some(*n), t);
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, run, Board};
    use crate::model::{LogClass, Status};

    const H8: (u16, u16) = (0x1e60, 0x2864);

    #[test]
    fn hef_for_another_chip_names_the_model_not_the_driver() {
        let b = Board::new()
            .pci(H8.0, H8.1, Some("hailo"))
            .module("hailo_pci", Some("4.21.0"))
            .log(
                "/var/log/app.log",
                LogClass::Workload,
                &[
                    "INFO : A model file already exists at /config/model_cache/yolov9t.hef not downloading one.",
                    "[HailoRT] [error] HEF format is not compatible with device. Device arch: HAILO8L, HEF arch: HAILO8",
                    "[HailoRT] [error] CHECK_SUCCESS failed with status=HAILO_INVALID_HEF(26)",
                ],
            )
            .build();
        let f = one("rpi5-hailo8", &b, "npu.workload");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary.contains("/config/model_cache/yolov9t.hef"),
            "{}",
            f.summary
        );
        assert!(
            f.summary.contains("HEF arch HAILO8, device arch HAILO8L"),
            "{}",
            f.summary
        );
        assert!(f.remedy.contains("--hw-arch hailo8l"), "{}", f.remedy);
        assert!(
            !f.remedy.contains("driver") && !f.remedy.contains("apt"),
            "{}",
            f.remedy
        );
        assert_eq!(f.evidence.len(), 2);
        // Only the known finding: no second, unexplained one for the same lines.
        assert_eq!(run("rpi5-hailo8", &b, "npu.workload").len(), 1);
        // HAILO_INVALID_HEF alone still names a model, without an architecture.
        let bare = Board::new()
            .log(
                "/var/log/app.log",
                LogClass::Workload,
                &["[HailoRT] [error] CHECK_SUCCESS failed with status=HAILO_INVALID_HEF(26)"],
            )
            .build();
        let f = one("rpi5-hailo8", &bare, "npu.workload");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(f.remedy.contains("Dataflow Compiler"), "{}", f.remedy);
    }

    #[test]
    fn rkllm_and_rknn_models_for_another_release() {
        let b = Board::new().log(
            "/var/log/rkllm/demo.log",
            LogClass::Workload,
            &[
                "rkllm-runtime version: 1.0.1",
                "Warning: The model version is too old, please use the latest toolkit to reconvert the model!",
                "The model target_platform does not match!",
                "RKLLM: failed to load model 'llama2-chat-7b-hf.rkllm'!!!",
            ],
        );
        let f = one("rk3588-rknpu", &b.build(), "npu.workload");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary
                .contains("rkllm-runtime 1.0.1 refuses the model llama2-chat-7b-hf.rkllm"),
            "{}",
            f.summary
        );
        assert!(
            f.summary.contains("older rkllm-toolkit")
                && f.summary.contains("another target platform"),
            "{}",
            f.summary
        );
        assert!(
            f.remedy.contains("target_platform='rk3588'"),
            "{}",
            f.remedy
        );
        let app = Board::new().log(
            "/var/log/rknn/demo.log",
            LogClass::Workload,
            &[
                "root@firefly:/build# ./rknn_yolov5_demo ../model/RK3588/yolov5s-640-640.rknn ../model/bus.jpg",
                "sdk version: 1.6.0 (9a7b5d24c@2023-12-13T17:31:11) driver version: 0.8.2",
                "E RKNN: [07:13:44.229] rknn_query, info_len(372) < sizeof(rknn_tensor_attr)(376)!",
                "rknn_init error ret=-5",
            ],
        );
        let f = one("rk3588-rknpu", &app.build(), "npu.workload");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary
                .contains("info_len(372) < sizeof(rknn_tensor_attr)(376)"),
            "{}",
            f.summary
        );
        assert!(f.summary.contains("yolov5s-640-640.rknn"), "{}", f.summary);
        assert!(f.remedy.contains("rknn_api.h"), "{}", f.remedy);
        assert!(!f.remedy.contains("move the kernel"), "{}", f.remedy);
    }

    fn status74(b: Board) -> Board {
        b.log(
            "/var/log/frigate.log",
            LogClass::Workload,
            &["[HailoRT] [error] CHECK_SUCCESS failed with status=HAILO_OUT_OF_PHYSICAL_DEVICES(74)"],
        )
    }

    #[test]
    fn a_held_hailo_names_its_holders() {
        let b = status74(
            Board::new()
                .pci(H8.0, H8.1, Some("hailo"))
                .npu_user(412, "frigate.detecto", "/dev/hailo0")
                .npu_user(977, "python3", "/dev/hailo0")
                .npu_user(978, "python3", "/dev/rknpu"),
        )
        .build();
        let f = one("rpi5-hailo8", &b, "npu.workload");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary
                .contains("/dev/hailo0 is open in pid 412 (frigate.detecto), pid 977 (python3);"),
            "{}",
            f.summary
        );
        assert!(
            f.summary.contains("(hailort_service) is not running"),
            "{}",
            f.summary
        );
        assert!(f.remedy.contains("hailort.service"), "{}", f.remedy);
        assert_eq!(f.evidence.len(), 3, "{:?}", f.evidence);
        // With the service running, the finding says so; the package check stays out of it.
        let s = status74(
            Board::new()
                .pci(H8.0, H8.1, Some("hailo"))
                .package("hailort", "4.20.0")
                .hailort_service(5),
        )
        .build();
        let f = one("rpi5-hailo8", &s, "npu.workload");
        assert!(
            f.summary.contains("runs (hailort_service, pid 5)"),
            "{}",
            f.summary
        );
        assert!(
            f.summary.contains("no process with /dev/hailo0 open"),
            "{}",
            f.summary
        );
        let p = one("rpi5-hailo8", &s, "hailo.package_generation");
        assert!(
            !p.evidence.iter().any(|e| e.text.contains("(74)")),
            "{:?}",
            p.evidence
        );
    }

    #[test]
    fn status_74_without_a_bound_driver_stays_with_the_binding() {
        let b = status74(Board::new().pci(H8.0, H8.1, None)).build();
        let f = one("rpi5-hailo8", &b, "npu.workload");
        assert_eq!(f.status, Status::Info, "{}", f.summary);
        assert!(f.summary.contains("hailo.driver_binding"), "{}", f.summary);
    }
}
