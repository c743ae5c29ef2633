//! `Elelem.open`'s options, converted: `Model._open(path, options)` hands the Hash
//! here and each key is checked for its type and range; an unknown or bad one is an
//! `ArgumentError` naming it. What they mean is documented on `Elelem.open`
//! (lib/elelem.rb); their defaults are [`engine::OpenParams`]'s.

use std::ffi::OsStr;
use std::ops::RangeInclusive;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use elelem_engine as engine;
use magnus::{prelude::*, r_hash::ForEach, Error, Integer, RHash, RString, Ruby, Symbol, TryConvert, Value};

use super::model::Model;

/// The keys `Elelem.open` takes, for the message that refuses another.
const KEYS: [&str; 20] = [
    "n_ctx",
    "n_threads",
    "adaptive_threads",
    "n_gpu_layers",
    "parallel",
    "queue",
    "flash_attn",
    "cache_type_k",
    "cache_type_v",
    "draft",
    "draft_tokens",
    "batch_invariant",
    "own_kernels",
    "rpc",
    "tensor_split",
    "rpc_timeout",
    "split_mode",
    "main_gpu",
    "kv_offload",
    "mmproj",
];

/// A model's path and how to open it.
pub struct OpenParams {
    pub path: PathBuf,
    pub params: engine::OpenParams,
}

impl OpenParams {
    /// `path` is taken as bytes: file names need not be UTF-8. `options` holds what
    /// the caller gave; the rest keep their defaults. A `draft:` given as a known
    /// model's name is already its path (the Ruby side fetches it).
    pub fn new(ruby: &Ruby, path: RString, options: RHash) -> Result<OpenParams, Error> {
        // SAFETY: copied at once, before any Ruby code can run.
        let path = PathBuf::from(OsStr::from_bytes(unsafe { path.as_slice() }));
        let mut entries = Vec::with_capacity(options.len());
        options.foreach(|key: Value, value: Value| {
            entries.push((key, value));
            Ok(ForEach::Continue)
        })?;
        let mut params = engine::OpenParams::default();
        // split_mode and main_gpu make one setting, in either order.
        let (mut split_none, mut main_gpu) = (false, 0);
        for (key, value) in entries {
            let name = Symbol::from_value(key).map(|s| s.name()).transpose()?;
            let arg = Arg {
                ruby,
                name: name.as_deref().unwrap_or(""),
                value,
            };
            match arg.name {
                "n_ctx" => params.n_ctx = arg.integer(1..=engine::runtime::context::MAX_N_CTX)?,
                "n_threads" => params.n_threads = arg.integer(1..=engine::runtime::context::MAX_THREADS)?,
                "adaptive_threads" => params.adaptive_threads = arg.boolean()?,
                "n_gpu_layers" if value.is_nil() => params.n_gpu_layers = None,
                "n_gpu_layers" => params.n_gpu_layers = Some(arg.integer(0..=u32::MAX)?),
                "rpc" => params.rpc = arg.endpoints()?,
                "tensor_split" => params.tensor_split = arg.shares()?,
                "rpc_timeout" => params.rpc_timeout = arg.seconds()?,
                "split_mode" => split_none = arg.split_mode()?,
                "main_gpu" => main_gpu = arg.integer(0..=u32::MAX)?,
                "kv_offload" => params.kv_offload = arg.boolean()?,
                "parallel" => params.parallel = arg.integer(1..=engine::MAX_SEQUENCES)?,
                "queue" => params.max_queue = arg.integer(0..=u32::MAX as usize)?,
                "flash_attn" => params.flash_attn = arg.flash_attn()?,
                "cache_type_k" => params.type_k = arg.cache_type()?,
                "cache_type_v" => params.type_v = arg.cache_type()?,
                "draft" => params.draft = arg.draft()?,
                "draft_tokens" if value.is_nil() => params.draft_tokens = engine::DraftLength::Adaptive,
                "draft_tokens" => {
                    let max = engine::runtime::speculative::MAX_DRAFT_TOKENS;
                    params.draft_tokens = engine::DraftLength::Fixed(arg.integer(1..=max)?);
                }
                "batch_invariant" => params.batch_invariant = arg.boolean()?,
                "own_kernels" => params.own_kernels = arg.boolean()?,
                "mmproj" => params.mmproj = arg.path()?,
                _ => {
                    return Err(Error::new(
                        ruby.exception_arg_error(),
                        format!(
                            "unknown keyword: {} (Elelem.open takes {})",
                            key.inspect(),
                            KEYS.join(", ")
                        ),
                    ))
                }
            }
        }
        if split_none {
            params.split = engine::Split::None { main: main_gpu };
        }
        Ok(OpenParams { path, params })
    }
}

/// One option: its key's name and its value.
struct Arg<'a> {
    ruby: &'a Ruby,
    name: &'a str,
    value: Value,
}

impl Arg<'_> {
    fn invalid(&self, expected: &str) -> Error {
        Error::new(
            self.ruby.exception_arg_error(),
            format!("{} must be {expected}, got {}", self.name, self.value.inspect()),
        )
    }

    /// An Integer within `range` (no Float, no String), in the type that holds it.
    fn integer<T>(&self, range: RangeInclusive<T>) -> Result<T, Error>
    where
        T: TryFrom<i64> + PartialOrd + std::fmt::Display,
    {
        let expected = format!("an Integer in {}..{}", range.start(), range.end());
        Integer::from_value(self.value)
            .and_then(|i| i.to_i64().ok())
            .and_then(|n| T::try_from(n).ok())
            .filter(|n| range.contains(n))
            .ok_or_else(|| self.invalid(&expected))
    }

    /// RPC endpoints: an Array of `"host:port"` Strings, or one String of them separated by commas.
    fn endpoints(&self) -> Result<Vec<String>, Error> {
        if let Some(s) = RString::from_value(self.value) {
            return Ok(s.to_string()?.split(',').map(|e| e.trim().to_string()).collect());
        }
        magnus::RArray::from_value(self.value)
            .and_then(|a| a.to_vec::<String>().ok())
            .ok_or_else(|| self.invalid("an Array of \"host:port\" Strings"))
    }

    /// An Array of non-negative Numerics: each device's share of the offloaded layers.
    fn shares(&self) -> Result<Vec<f32>, Error> {
        let expected = "an Array of non-negative numbers";
        magnus::RArray::from_value(self.value)
            .ok_or_else(|| self.invalid(expected))?
            .to_vec::<f64>()
            .ok()
            .filter(|v| v.iter().all(|x| x.is_finite() && *x >= 0.0))
            .map(|v| v.into_iter().map(|x| x as f32).collect())
            .ok_or_else(|| self.invalid(expected))
    }

    /// `:layer` (whole layers to each device, llama.cpp's default) or `:none` (all on
    /// `main_gpu`); `true` for `:none`. llama.cpp's `:row` splits a matrix across CUDA GPUs,
    /// which this build has not.
    fn split_mode(&self) -> Result<bool, Error> {
        match self.symbol().as_deref() {
            Some("layer") => Ok(false),
            Some("none") => Ok(true),
            Some("row") => Err(Error::new(
                self.ruby.exception_arg_error(),
                "split_mode :row splits matrices across CUDA devices, and this build has none (:layer or :none)",
            )),
            _ => Err(self.invalid(":layer or :none")),
        }
    }

    /// A positive number of seconds, at most a day.
    fn seconds(&self) -> Result<std::time::Duration, Error> {
        f64::try_convert(self.value)
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
            .map(std::time::Duration::from_secs_f64)
            .ok_or_else(|| self.invalid("a number of seconds above 0, at most 86400"))
    }

    /// `true` or `false` exactly: a truthy `1` is more likely a mistake than a yes.
    fn boolean(&self) -> Result<bool, Error> {
        if self.value.is_kind_of(self.ruby.class_true_class()) {
            Ok(true)
        } else if self.value.is_kind_of(self.ruby.class_false_class()) {
            Ok(false)
        } else {
            Err(self.invalid("true or false"))
        }
    }

    fn symbol(&self) -> Option<String> {
        Symbol::from_value(self.value).and_then(|s| s.name().ok().map(|n| n.into_owned()))
    }

    /// `:auto` (llama.cpp's default, which picks flash attention on the CPU), `true` or `false`.
    fn flash_attn(&self) -> Result<bool, Error> {
        match self.symbol().as_deref() {
            Some("auto") => Ok(true),
            Some(_) => Err(self.invalid(":auto, true or false")),
            None => self.boolean().map_err(|_| self.invalid(":auto, true or false")),
        }
    }

    /// A KV cache type by llama.cpp's name for it, as a Symbol.
    fn cache_type(&self) -> Result<engine::CacheType, Error> {
        self.symbol()
            .and_then(|name| engine::CacheType::from_name(&name))
            .ok_or_else(|| {
                let names: Vec<String> = engine::CacheType::ALL
                    .iter()
                    .map(|t| format!(":{}", t.name()))
                    .collect();
                self.invalid(&format!("one of {}", names.join(", ")))
            })
    }

    /// nil, a draft model's path, an open `Elelem::Model` (whose weights it shares),
    /// or `:lookup` / `:copy`.
    /// A file's path (a String: file names need not be UTF-8), or nil for none.
    fn path(&self) -> Result<Option<PathBuf>, Error> {
        if self.value.is_nil() {
            return Ok(None);
        }
        let path = RString::from_value(self.value).ok_or_else(|| self.invalid("a path (a String) or nil"))?;
        // SAFETY: copied at once, before any Ruby code can run.
        Ok(Some(PathBuf::from(OsStr::from_bytes(unsafe { path.as_slice() }))))
    }

    fn draft(&self) -> Result<Option<engine::Draft>, Error> {
        if self.value.is_nil() {
            return Ok(None);
        }
        if let Some(path) = RString::from_value(self.value) {
            // SAFETY: copied at once, before any Ruby code can run.
            let path = PathBuf::from(OsStr::from_bytes(unsafe { path.as_slice() }));
            return Ok(Some(engine::Draft::File(path)));
        }
        if let Ok(model) = <&Model>::try_convert(self.value) {
            return Ok(Some(engine::Draft::Model(model.model(self.ruby)?)));
        }
        match self.symbol().as_deref() {
            Some("lookup") => Ok(Some(engine::Draft::Lookup)),
            Some("copy") => Ok(Some(engine::Draft::Copy)),
            _ => Err(self.invalid("a path, a known model's name, an Elelem::Model, :lookup or :copy")),
        }
    }
}
