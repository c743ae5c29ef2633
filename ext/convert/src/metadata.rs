//! gguf-py's `Metadata` heuristics (`gguf/metadata.py`, `gguf/utility.py`) for the
//! authorship keys: the model's name, organization, basename, finetune, version
//! and size label, guessed from `config.json`'s `_name_or_path` and from the
//! model directory's name, and the default output file name.

use std::sync::OnceLock;

use regex::Regex;

/// The `general.*` naming keys as `Metadata` fills them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Naming {
    pub name: Option<String>,
    pub organization: Option<String>,
    pub basename: Option<String>,
    pub finetune: Option<String>,
    pub version: Option<String>,
    pub size_label: Option<String>,
}

/// The parts `Metadata.get_model_id_components` finds in a model id.
#[derive(Debug, Default, PartialEq)]
struct Components {
    full_name: Option<String>,
    org: Option<String>,
    basename: Option<String>,
    finetune: Option<String>,
    version: Option<String>,
    size_label: Option<String>,
}

fn re(cell: &'static OnceLock<Regex>, pattern: &str) -> &'static Regex {
    cell.get_or_init(|| Regex::new(pattern).expect("a valid pattern"))
}

fn is_decimal(c: char) -> bool {
    c.is_ascii_digit()
}

/// Python's `str.islower()`: some cased character, and none upper- or titlecase.
fn py_islower(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        if c.is_uppercase() {
            return false;
        }
        if c.is_lowercase() {
            cased = true;
        }
    }
    cased
}

/// Python's `str.title()`: each run of letters starts upper, goes on lower.
fn py_title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_cased = false;
    for c in s.chars() {
        if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = c.is_lowercase() || c.is_uppercase();
    }
    out
}

/// `Metadata.id_to_title`.
fn id_to_title(s: &str) -> String {
    static VERSIONISH: OnceLock<Regex> = OnceLock::new();
    let versionish = re(&VERSIONISH, r"^(v\d+(?:\.\d+)*|\d.*)$");
    s.trim()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            if py_islower(w) && !versionish.is_match(w) {
                py_title(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Basename,
    SizeLabel,
    Finetune,
    Version,
    Type,
}

/// `Metadata.get_model_id_components`, line by line.
fn model_id_components(model_id: &str, total_params: i64) -> Components {
    static VERSION: OnceLock<Regex> = OnceLock::new();
    static QUANT: OnceLock<Regex> = OnceLock::new();
    static SIZE: OnceLock<Regex> = OnceLock::new();
    static FINETUNE: OnceLock<Regex> = OnceLock::new();
    if model_id.contains(' ') {
        return Components {
            full_name: Some(model_id.to_string()),
            ..Components::default()
        };
    }
    let (mut org, full) = match model_id.split_once('/') {
        Some((org, rest)) => (Some(org.to_string()), rest.to_string()),
        None => (None, model_id.to_string()),
    };
    if org.as_deref().is_some_and(|o| o.starts_with('.')) {
        org = None;
    }
    let mut parts: Vec<String> = full.split('-').filter(|p| !p.is_empty()).map(str::to_string).collect();
    let mut kinds: Vec<Vec<Kind>> = vec![Vec::new(); parts.len()];
    let version_re = re(&VERSION, r"(?i)^(?:v|iter)?\d+(?:[.]\d+)*$");
    let quant_re = re(&QUANT, r"(?i)^(?:i?q\d(?:_\w)*|b?fp?(?:16|32))$");
    let size_re = re(
        &SIZE,
        r"(?i)^(?:(?:[A]|\d+[x])?\d+(?:[._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl)$",
    );
    let finetune_re = re(&FINETUNE, r"(?i)^(?:chat|instruct|vision|lora)$");
    for i in 0..parts.len() {
        let part = parts[i].clone();
        if version_re.is_match(&part) {
            kinds[i].push(Kind::Version);
        } else if quant_re.is_match(&part) {
            kinds[i].push(Kind::Type);
            parts[i] = part.to_uppercase();
        } else if i > 0 && size_re.is_match(&part) {
            let mut p: Vec<char> = part.replace('_', ".").chars().collect();
            if p.last().is_some_and(|&c| is_decimal(c)) && p.len() >= 2 {
                // bloom-7b1 -> 7.1b
                let n = p.len();
                let (a, b) = (p[n - 2], p[n - 1]);
                p.truncate(n - 2);
                p.extend(['.', b, a]);
            }
            if p.len() > 1 && is_decimal(p[p.len() - 2]) && "kmbt".contains(p[p.len() - 1]) {
                let n = p.len();
                p[n - 1] = p[n - 1].to_ascii_uppercase();
            }
            if total_params != 0 {
                let head: String = p[..p.len() - 1].iter().collect();
                let last = p[p.len() - 1];
                if let Ok(value) = head.parse::<f64>() {
                    let scale = match " KMBT".find(last) {
                        Some(k) => 1000f64.powi(k as i32),
                        None => 0.001,
                    };
                    let label_params = value * scale;
                    let smaller = total_params < 0 && label_params < (total_params.abs() / 8) as f64;
                    let far = total_params > 0
                        && (label_params - total_params as f64).abs() > (7 * total_params).div_euclid(8) as f64;
                    if smaller || far {
                        kinds[i].push(Kind::Finetune);
                        let n = p.len();
                        p[n - 1] = p[n - 1].to_ascii_lowercase();
                    }
                }
            }
            if kinds[i].is_empty() {
                kinds[i].push(Kind::SizeLabel);
            }
            parts[i] = p.into_iter().collect();
        } else if i > 0 && finetune_re.is_match(&part) {
            if total_params < 0 && part.eq_ignore_ascii_case("lora") {
                kinds[i].push(Kind::Type);
            } else {
                kinds[i].push(Kind::Finetune);
            }
        }
    }
    // Word-based size labels go when a number-based one is present.
    let numeric_size = parts
        .iter()
        .zip(&kinds)
        .any(|(n, t)| t.contains(&Kind::SizeLabel) && n.chars().any(is_decimal));
    if numeric_size {
        for (n, t) in parts.iter().zip(kinds.iter_mut()) {
            if t.contains(&Kind::SizeLabel) && n.chars().all(char::is_alphabetic) {
                t.retain(|k| *k != Kind::SizeLabel);
            }
        }
    }
    let mut at_start = true;
    for (part, t) in parts.iter().zip(kinds.iter_mut()) {
        let alpha_start = part.chars().next().is_some_and(char::is_alphabetic);
        if at_start && ((t.is_empty() && alpha_start) || t.contains(&Kind::Version)) {
            t.push(Kind::Basename);
        } else {
            at_start = false;
            if t.is_empty() {
                t.push(Kind::Finetune);
            }
        }
    }
    for t in kinds.iter_mut().rev() {
        if t.contains(&Kind::Basename) && t.len() > 1 {
            t.retain(|k| *k != Kind::Basename);
        } else {
            break;
        }
    }
    let join = |keep: &dyn Fn(&[Kind]) -> bool| {
        let picked: Vec<&str> = parts
            .iter()
            .zip(&kinds)
            .filter(|(_, t)| keep(t))
            .map(|(p, _)| p.as_str())
            .collect();
        (!picked.is_empty()).then(|| picked.join("-"))
    };
    let mut basename = join(&|t| t.contains(&Kind::Basename));
    let mut sizes: Vec<&str> = Vec::new();
    for (p, t) in parts.iter().zip(&kinds) {
        if t.contains(&Kind::SizeLabel) && !sizes.contains(&p.as_str()) {
            sizes.push(p);
        }
    }
    let size_label = (!sizes.is_empty()).then(|| sizes.join("-"));
    let finetune = join(&|t| t.contains(&Kind::Finetune));
    let version = join(&|t| t.contains(&Kind::Version) && !t.contains(&Kind::Basename));
    if size_label.is_none() && finetune.is_none() && version.is_none() {
        basename = None;
    }
    Components {
        full_name: Some(full),
        org,
        basename,
        finetune,
        version,
        size_label,
    }
}

impl Naming {
    fn fill(&mut self, c: Components) {
        if self.name.is_none() {
            self.name = c.full_name.map(|n| id_to_title(&n));
        }
        if self.organization.is_none() {
            self.organization = c.org.map(|o| id_to_title(&o));
        }
        self.basename = self.basename.take().or(c.basename);
        self.finetune = self.finetune.take().or(c.finetune);
        self.version = self.version.take().or(c.version);
        self.size_label = self.size_label.take().or(c.size_label);
    }

    /// `Metadata.load` without a model card or an override file: `_name_or_path`
    /// (when it is a model id, not a path), then the directory's name; the name
    /// defaults to the directory's name, and the size label to the parameter count.
    pub fn guess(name_or_path: Option<&str>, dir_name: &str, total_params: i64) -> Naming {
        let mut naming = Naming::default();
        if let Some(id) = name_or_path.filter(|id| id.matches('/').count() <= 1) {
            naming.fill(model_id_components(id, total_params));
        }
        naming.fill(model_id_components(dir_name, total_params));
        if naming.name.is_none() {
            naming.name = Some(dir_name.to_string());
        }
        if naming.size_label.is_none() && total_params > 0 {
            naming.size_label = Some(weight_count_notation(total_params.unsigned_abs()));
        }
        naming
    }

    /// `gguf.naming_convention` for a model file of `output_type` ("F16").
    pub fn file_stem(&self, output_type: &str) -> String {
        let name = match (&self.basename, &self.name) {
            (Some(b), _) => b.trim().replace([' ', '/'], "-"),
            (None, Some(n)) => n.trim().replace([' ', '/'], "-"),
            (None, None) => "ggml-model".to_string(),
        };
        let mut out = name;
        if let Some(s) = &self.size_label {
            out += &format!("-{s}");
        }
        if let Some(f) = &self.finetune {
            out += &format!("-{}", f.trim().replace(' ', "-"));
        }
        if let Some(v) = &self.version {
            out += &format!("-{}", v.trim().replace(' ', "-"));
        }
        out + &format!("-{}", output_type.to_uppercase())
    }
}

/// `gguf.utility.model_weight_count_rounded_notation(count, min_digits=2)`.
pub fn weight_count_notation(count: u64) -> String {
    let n = count as f64;
    let (scaled, suffix) = if n > 1e12 {
        (n * 1e-12, "T")
    } else if n > 1e9 {
        (n * 1e-9, "B")
    } else if n > 1e6 {
        (n * 1e-6, "M")
    } else {
        (n * 1e-3, "K")
    };
    // Python's round(): halves to even.
    let rounded = format!("{}", scaled.round_ties_even() as u64);
    let digits = rounded.trim_start_matches('0').len();
    let fix = 2usize.saturating_sub(digits);
    format!("{scaled:.fix$}{suffix}")
}

/// `pathlib.Path(dir).name`: the last component, `""` for `.`.
pub fn path_name(dir: &str) -> String {
    dir.split('/')
        .rfind(|c| !c.is_empty() && *c != ".")
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(id: &str, total: i64) -> (Option<String>, Option<String>, Option<String>, Option<String>) {
        let c = model_id_components(id, total);
        (c.basename, c.finetune, c.version, c.size_label)
    }

    fn s(v: &str) -> Option<String> {
        Some(v.to_string())
    }

    #[test]
    fn model_id_components_as_gguf_py() {
        // Expected values printed by gguf-py's own Metadata.get_model_id_components.
        assert_eq!(
            parts("Mixtral-8x7B-Instruct-v0.1", 0),
            (s("Mixtral"), s("Instruct"), s("v0.1"), s("8x7B"))
        );
        assert_eq!(parts("Meta-Llama-3-8B", 0), (s("Meta-Llama-3"), None, None, s("8B")));
        assert_eq!(parts("bloom-7b1-petals", 0), (s("bloom"), s("petals"), None, s("7.1B")));
        assert_eq!(
            parts("Phi-3-mini-4k-instruct", 0),
            (s("Phi-3-mini"), s("instruct"), None, s("4K"))
        );
        assert_eq!(
            parts("Phi-3-mini-4k-instruct", 3_800_000_000),
            (s("Phi-3"), s("4k-instruct"), None, s("mini"))
        );
        assert_eq!(parts("MiniLM-L6-H384-uncased", 22_000_000), (None, None, None, None));
        assert_eq!(
            parts("all-MiniLM-L6-v2", 22_000_000),
            (s("all-MiniLM-L6"), None, s("v2"), None)
        );
        assert_eq!(
            parts("Llama-3-Instruct-abliteration-LoRA-8B", 0),
            (s("Llama-3"), s("Instruct-abliteration-LoRA"), None, s("8B"))
        );
        assert_eq!(
            parts("bge-small-en-v1.5", 33_000_000),
            (s("bge"), s("en"), s("v1.5"), s("small"))
        );
        assert_eq!(parts("gpt2-xl", 1_500_000_000), (s("gpt2"), None, None, s("xl")));
        assert_eq!(parts("..", 0), (None, s(".."), None, None));
        let c = model_id_components("nreimers/MiniLM-L6-H384-uncased", 0);
        assert_eq!((c.full_name, c.org), (s("MiniLM-L6-H384-uncased"), s("nreimers")));
        let c = model_id_components("./x", 0);
        assert_eq!((c.full_name, c.org), (s("x"), None));
    }

    #[test]
    fn titles() {
        assert_eq!(id_to_title("MiniLM-L6-H384-uncased"), "MiniLM L6 H384 Uncased");
        assert_eq!(id_to_title("nreimers"), "Nreimers");
        assert_eq!(id_to_title("mixtral-v0.1-8x7b"), "Mixtral v0.1 8x7b");
        assert_eq!(id_to_title("hello2world-x"), "Hello2World X");
    }

    #[test]
    fn size_notation() {
        assert_eq!(weight_count_notation(22_565_376), "23M");
        assert_eq!(weight_count_notation(1_500_000_000), "1.5B");
        assert_eq!(weight_count_notation(7_241_732_096), "7.2B");
        assert_eq!(weight_count_notation(137_000), "137K");
        assert_eq!(weight_count_notation(1_000), "1.0K");
        assert_eq!(weight_count_notation(22_500_000), "22M");
        assert_eq!(weight_count_notation(999), "1.0K");
    }

    #[test]
    fn guess_and_file_name() {
        let n = Naming::guess(Some("nreimers/MiniLM-L6-H384-uncased"), "all-MiniLM-L6-v2", 22_713_216);
        assert_eq!(n.name.as_deref(), Some("MiniLM L6 H384 Uncased"));
        assert_eq!(n.organization.as_deref(), Some("Nreimers"));
        assert_eq!(n.basename.as_deref(), Some("all-MiniLM-L6"));
        assert_eq!(n.version.as_deref(), Some("v2"));
        assert_eq!(n.size_label.as_deref(), Some("23M"));
        assert_eq!(n.file_stem("F16"), "all-MiniLM-L6-23M-v2-F16");
        assert_eq!(path_name("/a/b/"), "b");
        assert_eq!(path_name("."), "");
        assert_eq!(path_name("a/.."), "..");
    }
}
