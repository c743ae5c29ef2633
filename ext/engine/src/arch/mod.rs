//! One module per architecture: its extra hyper-parameters, which tensors it
//! needs, and its forward graph built from the shared pieces in [`crate::model::layers`],
//! gathered in its `ARCH`. Adding an architecture is one file here and one line
//! in [`REGISTRY`].

mod apertus;
mod bert;
mod cohere2;
mod common;
mod deepseek2;
mod ernie4_5;
mod ernie4_5_moe;
mod exaone4;
mod falcon_h1;
mod gemma2;
mod gemma3;
mod gemma3n;
mod gemma4;
mod glm4;
mod glm4moe;
mod gpt_oss;
mod granite;
mod granite_hybrid;
mod hunyuan_dense;
mod lfm2;
mod llama;
mod llama4;
mod llama_cpp;
mod mamba2;
mod mistral3;
mod nemotron_h;
mod nomic_bert;
mod olmo2;
mod olmoe;
mod phi3;
mod phimoe;
mod qwen2;
mod qwen2moe;
mod qwen2vl;
mod qwen3;
mod qwen35;
mod qwen35moe;
mod qwen3moe;
mod qwen3next;
mod qwen3vl;
mod qwen3vlmoe;
mod seed_oss;
mod smollm3;
mod starcoder2;

use std::path::Path;

use elelem_gguf::{Gguf, Value};

use crate::model::{Arch, ArchSpec, Model, ModelParams};
use crate::{Error, Result};

pub use llama_cpp::LLAMA_CPP_ARCHITECTURES;

/// Every architecture elelem runs, by its `general.architecture` name.
pub const REGISTRY: &[&ArchSpec] = &[
    &llama::ARCH,
    &qwen2::ARCH,
    &qwen2vl::ARCH,
    &qwen3::ARCH,
    &qwen3moe::ARCH,
    &gemma2::ARCH,
    &gemma3::ARCH,
    &gemma3n::ARCH,
    &gemma4::ARCH,
    &olmo2::ARCH,
    &granite::ARCH,
    &smollm3::ARCH,
    &phi3::ARCH,
    &bert::ARCH,
    &nomic_bert::ARCH,
    &glm4::ARCH,
    &exaone4::ARCH,
    &ernie4_5::ARCH,
    &seed_oss::ARCH,
    &hunyuan_dense::ARCH,
    &starcoder2::ARCH,
    &cohere2::ARCH,
    &olmoe::ARCH,
    &qwen2moe::ARCH,
    &phimoe::ARCH,
    &ernie4_5_moe::ARCH,
    &apertus::ARCH,
    &mistral3::ARCH,
    &lfm2::ARCH,
    &gpt_oss::ARCH,
    &glm4moe::ARCH,
    &deepseek2::ARCH,
    &mamba2::ARCH,
    &granite_hybrid::ARCH,
    &qwen35::ARCH,
    &qwen35moe::ARCH,
    &nemotron_h::ARCH,
    &falcon_h1::ARCH,
    &qwen3next::ARCH,
    &llama4::ARCH,
    &qwen3vl::ARCH,
    &qwen3vlmoe::ARCH,
];

/// The architecture named `name` (a file's `general.architecture`); one elelem does
/// not run is [`Error::Unsupported`], saying whether llama.cpp runs it.
pub fn lookup(name: &str) -> Result<Arch> {
    if let Some(spec) = REGISTRY.iter().find(|spec| spec.name == name) {
        return Ok(Arch::new(spec));
    }
    let names: Vec<&str> = REGISTRY.iter().map(|spec| spec.name).collect();
    let llama_cpp = if LLAMA_CPP_ARCHITECTURES.contains(&name) {
        "llama.cpp runs it"
    } else {
        "llama.cpp does not know it either"
    };
    Err(Error::Unsupported(format!(
        "architecture '{name}' is not one elelem runs ({llama_cpp}); elelem runs {}",
        names.join(", ")
    )))
}

// Opening a file is the registry's part: only it knows every architecture.
impl Model {
    pub fn open(path: impl AsRef<Path>, params: &ModelParams) -> Result<Model> {
        let path = path.as_ref();
        let gguf = Gguf::open(path).map_err(|e| Error::Load(format!("{}: {e}", path.display())))?;
        Model::from_gguf_with(gguf, params).map_err(|e| match e {
            Error::Load(msg) => Error::Load(format!("{}: {msg}", path.display())),
            Error::Unsupported(msg) => Error::Unsupported(format!("{}: {msg}", path.display())),
            other => other,
        })
    }

    pub fn from_gguf(gguf: Gguf) -> Result<Model> {
        Model::from_gguf_with(gguf, &ModelParams::default())
    }

    pub fn from_gguf_with(gguf: Gguf, params: &ModelParams) -> Result<Model> {
        let name = gguf
            .get("general.architecture")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Load("missing general.architecture".into()))?;
        let arch = lookup(name)?;
        Model::load(gguf, arch, params)
    }
}
