//! A safetensors file: an 8-byte little-endian header length, a JSON header
//! (`{"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`)
//! and the raw little-endian data, read through a memory map. Every offset and
//! size is checked against the file before a byte is read.

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;
use serde_json::Value;

use crate::{ConvertError, Result};

/// An element type: the three float types convert; any other (`I64`
/// `position_ids`, say) is fine as long as the converter drops the tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    BF16,
    Other(String),
}

impl Dtype {
    fn parse(s: &str) -> Dtype {
        match s {
            "F32" => Dtype::F32,
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            other => Dtype::Other(other.to_string()),
        }
    }

    /// Bytes per element, for the types safetensors defines.
    fn size(&self) -> Option<u64> {
        match self {
            Dtype::F32 => Some(4),
            Dtype::F16 | Dtype::BF16 => Some(2),
            Dtype::Other(s) => match s.as_str() {
                "F64" | "I64" | "U64" => Some(8),
                "I32" | "U32" => Some(4),
                "I16" | "U16" => Some(2),
                "I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2" => Some(1),
                _ => None,
            },
        }
    }
}

/// One tensor's place in the file.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub name: String,
    pub dtype: Dtype,
    /// Row-major (PyTorch's) order, outermost first.
    pub shape: Vec<u64>,
    begin: usize,
    end: usize,
}

/// An open safetensors file; [`SafeTensors::tensors`] are sorted by name, as
/// the safetensors library (and llama.cpp's converter) list them.
pub struct SafeTensors {
    path: String,
    map: Mmap,
    data_start: usize,
    tensors: Vec<Tensor>,
}

impl SafeTensors {
    pub fn open(path: &Path) -> Result<SafeTensors> {
        let shown = path.display().to_string();
        let io = |source| ConvertError::Io {
            path: shown.clone(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; a file truncated under us is the caller's
        // problem, as with every mapped model file.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let bad = |why: String| ConvertError::BadSafetensors {
            path: shown.clone(),
            why,
        };
        if map.len() < 8 {
            return Err(bad(format!("{} bytes, too short for the header length", map.len())));
        }
        let header_len = u64::from_le_bytes(map[..8].try_into().expect("8 bytes"));
        if header_len > (map.len() - 8) as u64 {
            return Err(bad(format!(
                "the header says it is {header_len} bytes, but only {} follow",
                map.len() - 8
            )));
        }
        let data_start = 8 + header_len as usize;
        let header: Value =
            serde_json::from_slice(&map[8..data_start]).map_err(|e| bad(format!("the header is not JSON: {e}")))?;
        let Value::Object(entries) = header else {
            return Err(bad("the header is not a JSON object".into()));
        };
        let data_len = (map.len() - data_start) as u64;
        let mut tensors = Vec::with_capacity(entries.len());
        for (name, meta) in &entries {
            if name == "__metadata__" {
                continue;
            }
            let what = |why: &str| bad(format!("tensor {name:?}: {why}"));
            let dtype_name = meta
                .get("dtype")
                .and_then(Value::as_str)
                .ok_or_else(|| what("no dtype"))?;
            let dtype = Dtype::parse(dtype_name);
            let shape = meta
                .get("shape")
                .and_then(Value::as_array)
                .and_then(|dims| dims.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
                .ok_or_else(|| what("no shape (an array of sizes)"))?;
            let offsets = meta
                .get("data_offsets")
                .and_then(Value::as_array)
                .and_then(|o| o.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
                .filter(|o| o.len() == 2)
                .ok_or_else(|| what("no data_offsets ([begin, end])"))?;
            let (begin, end) = (offsets[0], offsets[1]);
            if begin > end || end > data_len {
                return Err(what(&format!(
                    "data_offsets [{begin}, {end}] outside the {data_len} data bytes"
                )));
            }
            let n = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
            let size = dtype
                .size()
                .ok_or_else(|| what(&format!("unknown dtype {dtype_name}")))?;
            if n.and_then(|n| n.checked_mul(size)) != Some(end - begin) {
                return Err(what(&format!(
                    "shape {shape:?} of {dtype_name} does not fill its {} bytes",
                    end - begin
                )));
            }
            tensors.push(Tensor {
                name: name.clone(),
                dtype,
                shape,
                begin: begin as usize,
                end: end as usize,
            });
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(SafeTensors {
            path: shown,
            map,
            data_start,
            tensors,
        })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// The tensor's raw little-endian bytes.
    pub fn bytes(&self, t: &Tensor) -> &[u8] {
        &self.map[self.data_start + t.begin..self.data_start + t.end]
    }
}
