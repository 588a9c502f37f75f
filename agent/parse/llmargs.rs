//! llama.cpp / ik_llama.cpp command lines: the arguments that decide where tensors go and how
//! big the KV cache is (`-m`, `-ot`, `-ngl`, `-c`, `-ctk`, `-ctv`, `-fa`, `-mla`, `-nkvo`,
//! `--cpu-moe`, `--n-cpu-moe`, `--fit`, `--log-file`), from a `/proc/<pid>/cmdline` argv or from a
//! shell-quoted string given with `check --llm-cmdline`; and the Python servers that place
//! weights by their own configuration (KTransformers, SGLang, vLLM).
//!
//! `-ot`/`--override-tensor` as this agent understands llama.cpp's `common/arg.cpp`
//! (`parse_tensor_buffer_overrides`): the value is split on every `,` (so a regex must not contain
//! a comma: `{1,3}` breaks it), each piece is split at its first `=` into a pattern and a buffer
//! type name, a piece without `=` stops the program ("invalid value"), and a buffer name that no
//! registered device offers stops it too ("unknown buffer type"). Each `-ot` appends its rules,
//! so the order on the command line is the order the rules are tried in.
//!
//! `--cpu-moe` and `--n-cpu-moe N` are kept as [`MoeFlag`]s with their place among the `-ot`
//! rules: which rules they add, and where, depends on the program and its build
//! (`check::llm::upstream`), so they are expanded only once the build is known.

/// Splits a shell command line into words: whitespace separates, `'...'` is literal, `"..."`
/// honours `\"`, `\\`, `\$` and `` \` ``, and a backslash outside quotes escapes the next
/// character. An unterminated quote is an error.
pub fn shell_words(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut has = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                has = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                has = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.peek() {
                            Some(&n) if matches!(n, '"' | '\\' | '$' | '`') => {
                                cur.push(n);
                                chars.next();
                            }
                            Some('\n') => {
                                chars.next();
                            }
                            _ => cur.push('\\'),
                        },
                        Some(x) => cur.push(x),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(x) => {
                    cur.push(x);
                    has = true;
                }
                None => {
                    cur.push('\\');
                    has = true;
                }
            },
            c if c.is_whitespace() => {
                if has {
                    out.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            c => {
                cur.push(c);
                has = true;
            }
        }
    }
    if has {
        out.push(cur);
    }
    Ok(out)
}

/// Where a tensor-override rule came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleOrigin {
    /// An `-ot`/`--override-tensor` value (the argument's position in argv).
    OverrideTensor {
        /// Index in argv of the value.
        arg: usize,
    },
    /// `--cpu-moe` / `-cmoe`.
    CpuMoe,
    /// `--n-cpu-moe N`, the rule for layer `layer`.
    NCpuMoe {
        /// The layer.
        layer: u32,
    },
    /// A rule llama.cpp's `--fit` adds when neither `-ngl` nor any override is given (the routed
    /// experts of layer `layer` in RAM).
    Fit {
        /// The layer.
        layer: u32,
    },
}

/// One `PATTERN=BUFFER` rule, or a piece that is not one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRule {
    /// The piece as written (`blk\.[0-9]+\.ffn_.*_exps\.weight=CPU`).
    pub text: String,
    /// The regex (before the first `=`); `None` when the piece has no `=`.
    pub pattern: Option<String>,
    /// The buffer type name (after the first `=`).
    pub buffer: String,
    /// Where it came from.
    pub origin: RuleOrigin,
}

/// `--cpu-moe` / `-cmoe` or `--n-cpu-moe N` / `-ncmoe N`, not yet expanded into rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoeFlag {
    /// `None` for `--cpu-moe` (every layer), else the `N` of `--n-cpu-moe N`.
    pub layers: Option<u32>,
    /// How many `-ot` rules precede it on the command line.
    pub after_rules: usize,
    /// The flag as written (`-cmoe`, `--n-cpu-moe 30`).
    pub text: String,
}

/// Which program the command line runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// Upstream llama.cpp (`llama-server`, `llama-cli`, ...).
    LlamaCpp,
    /// ik_llama.cpp: its path says so, or it uses ik-only flags (`-mla`, `-fmoe`, `-rtr`, `-amb`).
    IkLlamaCpp,
    /// KTransformers (Python): experts are placed by its optimize-rule YAML, not by `-ot`.
    KTransformers,
    /// SGLang (`python -m sglang.launch_server`): weights placed by its parallelism settings.
    SGLang,
    /// vLLM (`vllm serve`, `python -m vllm.entrypoints...`): likewise.
    Vllm,
}

impl Engine {
    /// Name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Engine::LlamaCpp => "llama.cpp",
            Engine::IkLlamaCpp => "ik_llama.cpp",
            Engine::KTransformers => "KTransformers",
            Engine::SGLang => "SGLang",
            Engine::Vllm => "vLLM",
        }
    }

    /// A Python server that places weights by its own configuration, not by `-ot`/`-ngl`.
    pub fn places_by_own_config(self) -> bool {
        matches!(self, Engine::KTransformers | Engine::SGLang | Engine::Vllm)
    }
}

/// The arguments that matter for placement and memory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LlmArgs {
    /// argv as given, with secret values redacted ([`crate::sys::redact::redact_argv`]).
    pub argv: Vec<String>,
    /// `-m`/`--model`.
    pub model: Option<String>,
    /// `-hf`, `-mu`/`--model-url` and the like: a model this agent cannot read.
    pub remote_model: Option<String>,
    /// The `-ot` rules in command-line order (`--cpu-moe`/`--n-cpu-moe` are in `moe_flags`).
    pub rules: Vec<RawRule>,
    /// `--cpu-moe` / `--n-cpu-moe`, in command-line order.
    pub moe_flags: Vec<MoeFlag>,
    /// `-fit`/`--fit` as written (`on`, `off`).
    pub fit: Option<String>,
    /// `--log-file`.
    pub log_file: Option<String>,
    /// The command line uses DeepEP (SGLang `--moe-a2a-backend deepep`/`--enable-deepep-moe`,
    /// vLLM `--all2all-backend deepep_*`).
    pub deepep: bool,
    /// `-ngl` as written (`99`, `all`, `auto`).
    pub ngl: Option<String>,
    /// `-c`/`--ctx-size`.
    pub ctx: Option<String>,
    /// `-ctk`/`--cache-type-k`.
    pub cache_type_k: Option<String>,
    /// `-ctv`/`--cache-type-v`.
    pub cache_type_v: Option<String>,
    /// `-fa`/`--flash-attn` present (and not `off`/`0`/`false`).
    pub flash_attn: bool,
    /// `-mla`/`--mla-use` (ik_llama.cpp).
    pub mla: Option<String>,
    /// `-nkvo`/`--no-kv-offload`.
    pub no_kv_offload: bool,
    /// Flags only ik_llama.cpp has, seen on this command line.
    pub ik_flags: Vec<String>,
    /// The program.
    pub engine: Option<Engine>,
}

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// True when argv runs SGLang (`python -m sglang.launch_server`, `sglang serve`,
/// `python -m sglang_router.launch_server`).
pub fn is_sglang(argv: &[String]) -> bool {
    argv.iter().take(4).any(|a| {
        let b = basename(a);
        b == "sglang" || a.starts_with("sglang.") || a.starts_with("sglang_router.")
    })
}

/// True when argv runs vLLM (`vllm serve`, `python -m vllm.entrypoints.openai.api_server`).
pub fn is_vllm(argv: &[String]) -> bool {
    argv.iter()
        .take(4)
        .any(|a| basename(a) == "vllm" || a.starts_with("vllm."))
}

/// True when argv asks for DeepEP all-to-all kernels.
fn uses_deepep(argv: &[String]) -> bool {
    argv.iter().any(|a| {
        let l = a.to_ascii_lowercase();
        l.contains("deepep") || l.contains("deep_ep")
    })
}

/// True when argv runs KTransformers (`ktransformers ...`, `python -m ktransformers.server.main`,
/// `python .../ktransformers/local_chat.py`).
pub fn is_ktransformers(argv: &[String]) -> bool {
    argv.iter().take(4).any(|a| {
        let b = basename(a);
        b.starts_with("ktransformers") || a.contains("/ktransformers/")
    })
}

const WITH_VALUE: &[&str] = &[
    "-m",
    "--model",
    "-ot",
    "--override-tensor",
    "-ngl",
    "--gpu-layers",
    "--n-gpu-layers",
    "-c",
    "--ctx-size",
    "-ctk",
    "--cache-type-k",
    "-ctv",
    "--cache-type-v",
    "-mla",
    "--mla-use",
    "-ncmoe",
    "--n-cpu-moe",
    "-hf",
    "-hfr",
    "--hf-repo",
    "-mu",
    "--model-url",
    "-t",
    "--threads",
    "-b",
    "--batch-size",
    "-ub",
    "--ubatch-size",
    "-np",
    "--parallel",
    "--host",
    "--port",
    "-ts",
    "--tensor-split",
    "-sm",
    "--split-mode",
    "-mg",
    "--main-gpu",
    "-amb",
    "--attention-max-batch",
    "--numa",
    "-a",
    "--alias",
    "--log-file",
];

const IK_ONLY: &[&str] = &[
    "-mla",
    "--mla-use",
    "-fmoe",
    "--fused-moe",
    "-rtr",
    "--run-time-repack",
    "-amb",
    "--attention-max-batch",
    "-ser",
    "--smart-expert-reduction",
];

/// Reads the arguments of a llama.cpp-style command line. Unknown flags are ignored; a value is
/// taken from the next word or from `--flag=value`.
pub fn parse_llm_args(argv: &[String]) -> LlmArgs {
    let mut a = LlmArgs {
        // Kept for evidence: secret values (`--api-key`, tokens, passwords) never leave.
        argv: crate::sys::redact::redact_argv(argv),
        ..LlmArgs::default()
    };
    let own = if is_ktransformers(argv) {
        Some(Engine::KTransformers)
    } else if is_sglang(argv) {
        Some(Engine::SGLang)
    } else if is_vllm(argv) {
        Some(Engine::Vllm)
    } else {
        None
    };
    if let Some(e) = own {
        a.engine = Some(e);
        a.deepep = uses_deepep(argv);
        return a;
    }
    let prog = argv.first().map(String::as_str).unwrap_or("");
    let mut i = 1;
    while i < argv.len() {
        let word = argv[i].as_str();
        let (flag, inline) = match word.split_once('=') {
            Some((f, v)) if f.starts_with('-') && WITH_VALUE.contains(&f) => {
                (f, Some(v.to_string()))
            }
            _ => (word, None),
        };
        let takes = WITH_VALUE.contains(&flag);
        let (value, value_at) = if let Some(v) = inline {
            (Some(v), i)
        } else if takes {
            (argv.get(i + 1).cloned(), i + 1)
        } else {
            (None, i)
        };
        if IK_ONLY.contains(&flag) {
            a.ik_flags.push(flag.to_string());
        }
        match flag {
            "-m" | "--model" => a.model = value.clone(),
            "-hf" | "-hfr" | "--hf-repo" | "-mu" | "--model-url" => {
                // Named in findings: a URL's credentials stay on the board.
                a.remote_model = value.as_deref().map(crate::sys::redact::redact_url)
            }
            "-ot" | "--override-tensor" => {
                if let Some(v) = &value {
                    for piece in v.split(',') {
                        let (pattern, buffer) = match piece.split_once('=') {
                            Some((p, b)) => (Some(p.to_string()), b.to_string()),
                            None => (None, String::new()),
                        };
                        a.rules.push(RawRule {
                            text: piece.to_string(),
                            pattern,
                            buffer,
                            origin: RuleOrigin::OverrideTensor { arg: value_at },
                        });
                    }
                }
            }
            "-cmoe" | "--cpu-moe" => a.moe_flags.push(MoeFlag {
                layers: None,
                after_rules: a.rules.len(),
                text: flag.to_string(),
            }),
            "-ncmoe" | "--n-cpu-moe" => {
                let n = value
                    .as_deref()
                    .and_then(|v| v.parse::<u32>().ok())
                    .unwrap_or(0)
                    .min(10_000);
                a.moe_flags.push(MoeFlag {
                    layers: Some(n),
                    after_rules: a.rules.len(),
                    text: format!("{flag} {}", value.as_deref().unwrap_or("")),
                });
            }
            "-fit" | "--fit" => {
                // llama.cpp: `--fit on|off`; ik_llama.cpp: a switch.
                match argv.get(i + 1).map(String::as_str) {
                    Some(v @ ("on" | "off" | "1" | "0" | "true" | "false")) => {
                        a.fit = Some(v.to_string());
                        i += 1;
                    }
                    _ => a.fit = Some("on".into()),
                }
            }
            "--log-file" => a.log_file = value.clone(),
            "-ngl" | "--gpu-layers" | "--n-gpu-layers" => a.ngl = value.clone(),
            "-c" | "--ctx-size" => a.ctx = value.clone(),
            "-ctk" | "--cache-type-k" => a.cache_type_k = value.clone(),
            "-ctv" | "--cache-type-v" => a.cache_type_v = value.clone(),
            "-mla" | "--mla-use" => a.mla = value.clone(),
            "-nkvo" | "--no-kv-offload" => a.no_kv_offload = true,
            "-fa" | "--flash-attn" => {
                // ik_llama.cpp and older llama.cpp: a switch; newer llama.cpp: on|off|auto.
                match argv.get(i + 1).map(String::as_str) {
                    Some(v @ ("on" | "off" | "auto" | "1" | "0" | "true" | "false")) => {
                        a.flash_attn = matches!(v, "on" | "1" | "true");
                        i += 1;
                    }
                    _ => a.flash_attn = true,
                }
            }
            _ => {}
        }
        i = if takes && value_at > i { i + 2 } else { i + 1 };
    }
    a.engine = Some(if prog.contains("ik_llama") || !a.ik_flags.is_empty() {
        Engine::IkLlamaCpp
    } else {
        Engine::LlamaCpp
    });
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(
            shell_words(r#"llama-server -ot 'blk\.[0-9]+\.ffn_.*_exps\.weight=CPU' -m "/models/a b.gguf" x\ y"#).unwrap(),
            v(&["llama-server", "-ot", r"blk\.[0-9]+\.ffn_.*_exps\.weight=CPU", "-m", "/models/a b.gguf", "x y"])
        );
        assert_eq!(
            shell_words(r#"-ot "a\\.b=CPU""#).unwrap(),
            v(&["-ot", r"a\.b=CPU"])
        );
        assert_eq!(
            shell_words(r"-ot blk\\.3=CPU").unwrap(),
            v(&["-ot", r"blk\.3=CPU"])
        );
        assert!(shell_words("-ot 'x").is_err());
        assert_eq!(shell_words("  ").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn guide_command_line() {
        let a = parse_llm_args(&v(&[
            "/opt/ik_llama.cpp/build/bin/llama-server",
            "-m",
            "/models/r1.gguf",
            "-ngl",
            "99",
            "-ot",
            r"blk\.[0-9]+\.ffn_.*_exps\.weight=CPU",
            "-c",
            "8192",
            "-fa",
            "-mla",
            "3",
            "-fmoe",
        ]));
        assert_eq!(a.model.as_deref(), Some("/models/r1.gguf"));
        assert_eq!(a.ngl.as_deref(), Some("99"));
        assert_eq!(a.rules.len(), 1);
        assert_eq!(
            a.rules[0].pattern.as_deref(),
            Some(r"blk\.[0-9]+\.ffn_.*_exps\.weight")
        );
        assert_eq!(a.rules[0].buffer, "CPU");
        assert_eq!(a.rules[0].origin, RuleOrigin::OverrideTensor { arg: 6 });
        assert!(a.flash_attn);
        assert_eq!(a.mla.as_deref(), Some("3"));
        assert_eq!(a.engine, Some(Engine::IkLlamaCpp));
    }

    #[test]
    fn rules_keep_their_order_and_bad_pieces() {
        let a = parse_llm_args(&v(&[
            "llama-server",
            "-ot",
            "blk\\.3\\.=CUDA0,exps=CPU",
            "--cpu-moe",
            "--override-tensor=attn{1,2}=CPU",
            "-fa",
            "off",
        ]));
        let texts: Vec<&str> = a.rules.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(
            texts,
            vec!["blk\\.3\\.=CUDA0", "exps=CPU", "attn{1", "2}=CPU"]
        );
        assert_eq!(
            a.moe_flags,
            vec![MoeFlag {
                layers: None,
                after_rules: 2,
                text: "--cpu-moe".into()
            }]
        );
        assert_eq!(
            a.rules[2].pattern, None,
            "a comma inside {{1,2}} splits the rule"
        );
        assert!(!a.flash_attn);
        assert_eq!(a.engine, Some(Engine::LlamaCpp));
        let n = parse_llm_args(&v(&["llama-server", "--n-cpu-moe", "2", "--fit", "off"]));
        assert!(n.rules.is_empty());
        assert_eq!(n.moe_flags[0].layers, Some(2));
        assert_eq!(n.fit.as_deref(), Some("off"));
        let ik = parse_llm_args(&v(&["ik_llama.cpp/llama-server", "--fit", "-m", "x.gguf"]));
        assert_eq!(ik.fit.as_deref(), Some("on"));
        assert_eq!(
            ik.model.as_deref(),
            Some("x.gguf"),
            "ik's --fit takes no value"
        );
    }

    #[test]
    fn python_servers_and_deepep() {
        let s = parse_llm_args(&v(&[
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/m",
            "--moe-a2a-backend",
            "deepep",
        ]));
        assert_eq!(s.engine, Some(Engine::SGLang));
        assert!(s.deepep);
        let v2 = parse_llm_args(&v(&["/usr/local/bin/vllm", "serve", "Qwen/Qwen3-30B-A3B"]));
        assert_eq!(v2.engine, Some(Engine::Vllm));
        assert!(!v2.deepep);
        assert!(Engine::Vllm.places_by_own_config() && !Engine::IkLlamaCpp.places_by_own_config());
    }

    #[test]
    fn ktransformers() {
        let a = parse_llm_args(&v(&[
            "python3",
            "-m",
            "ktransformers.server.main",
            "--model_path",
            "x",
        ]));
        assert_eq!(a.engine, Some(Engine::KTransformers));
        assert!(a.rules.is_empty());
    }
}
