use std::io::Write;
use std::path::Path;

use crate::{GgufError, Result, TensorType, Value, DEFAULT_ALIGNMENT};

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    tensor_type: TensorType,
    data: Vec<u8>,
}

/// Builds a GGUF (version 3) in memory: metadata in insertion order, tensors
/// laid out at `general.alignment` (32). Used by tests, the tiny canary model
/// and the fuzz corpus.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set(&mut self, key: &str, value: Value) -> &mut Self {
        self.metadata.retain(|(k, _)| k != key);
        self.metadata.push((key.to_string(), value));
        self
    }

    pub fn remove(&mut self, key: &str) -> &mut Self {
        self.metadata.retain(|(k, _)| k != key);
        self
    }

    /// Removes every tensor called `name`.
    pub fn remove_tensor(&mut self, name: &str) -> &mut Self {
        self.tensors.retain(|t| t.name != name);
        self
    }

    /// Adds a tensor; `data` should hold exactly its bytes (the writer does not
    /// check, so tests can write files that lie).
    pub fn add_tensor(&mut self, name: &str, dims: &[u64], tensor_type: TensorType, data: Vec<u8>) -> &mut Self {
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            tensor_type,
            data,
        });
        self
    }

    /// Adds `other`'s metadata (each key as [`GgufWriter::set`] sets it: a key both have
    /// takes `other`'s value, moved after the others) and then its tensors: two writers'
    /// files in one (a projector with both a vision and an audio encoder).
    pub fn append(&mut self, other: GgufWriter) -> &mut Self {
        for (key, value) in other.metadata {
            self.set(&key, value);
        }
        self.tensors.extend(other.tensors);
        self
    }

    /// The bytes of the first tensor called `name`, to alter in place.
    pub fn tensor_data_mut(&mut self, name: &str) -> Option<&mut [u8]> {
        self.tensors
            .iter_mut()
            .find(|t| t.name == name)
            .map(|t| t.data.as_mut_slice())
    }

    /// Adds an F32 tensor from values.
    pub fn add_f32(&mut self, name: &str, dims: &[u64], values: &[f32]) -> &mut Self {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, dims, TensorType::F32, data)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            write_string(&mut out, key);
            out.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            write_value(&mut out, value);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            write_string(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.tensor_type.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.data.len() as u64).div_ceil(DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT;
        }
        pad_to_alignment(&mut out);
        let data_start = out.len();
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off as usize, 0);
            out.extend_from_slice(&t.data);
        }
        pad_to_alignment(&mut out);
        out
    }

    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut file = std::fs::File::create(path).map_err(io)?;
        file.write_all(&self.to_bytes()).map_err(io)
    }
}

fn pad_to_alignment(out: &mut Vec<u8>) {
    let len = (out.len() as u64).div_ceil(DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT;
    out.resize(len as usize, 0);
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.push(*v as u8),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            // An empty array's element type is not knowable from its items; U8 is as good as any.
            let elem = items.first().map_or(0, |v| v.value_type() as u32);
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_value(out, item);
            }
        }
    }
}
