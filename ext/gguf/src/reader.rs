use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::{GgufError, Result, TensorType, Value, ValueType, DEFAULT_ALIGNMENT, MAX_DIMS};

/// Bounds that keep a hostile header from asking for more memory than the file
/// could justify: every element costs at least one byte of file, but a parsed
/// [`Value`] costs 32 bytes of memory, so array elements are budgeted for the
/// whole file, four times the million of the largest vocabularies.
const MAX_ARRAY_ELEMENTS: u64 = 1 << 22;
const MAX_ARRAY_DEPTH: usize = 2;
const MAX_STRING_LEN: u64 = 1 << 24;
/// Real models have dozens of keys and at most tens of thousands of tensors.
const MAX_KEYS: u64 = 1 << 16;
const MAX_TENSORS: u64 = 1 << 20;
/// Counts come from the file: vectors grow as entries actually parse, from at most this.
const MAX_PREALLOCATED: u64 = 1 << 10;

/// Where a tensor lives in the data section, and what it is.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub tensor_type: TensorType,
    /// Offset from the start of the data section.
    pub offset: u64,
    /// Bytes of data, validated to lie inside the data section.
    pub size: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The dimensions padded to four with ones, as ggml's `ne`.
    pub fn ne(&self) -> [u64; MAX_DIMS] {
        let mut ne = [1; MAX_DIMS];
        ne[..self.dims.len()].copy_from_slice(&self.dims);
        ne
    }
}

enum Bytes {
    Mapped(Mmap),
    Owned(Aligned),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(a) => a.as_slice(),
        }
    }

    fn release(&self, range: std::ops::Range<usize>) {
        let Bytes::Mapped(map) = self else { return };
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(0);
        if page == 0 || range.end > map.len() {
            return;
        }
        // Whole pages only (a mapping starts on a page): the pages at the edges hold
        // bytes of the neighbours too.
        let start = range.start.next_multiple_of(page);
        let end = range.end / page * page;
        if end > start {
            // SAFETY: the map is read-only and file-backed, so DONTNEED loses nothing:
            // a later read faults the same bytes back in from the file.
            let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
        }
    }
}

/// A GGUF file's bytes without its parsed metadata: what a loaded model keeps
/// alive (its weights point into the mapping) once it has read what it needs.
pub struct FileBytes(Bytes);

impl FileBytes {
    pub fn as_slice(&self) -> &[u8] {
        self.0.as_slice()
    }
}

/// An in-memory copy of a file that starts on a 64-byte boundary, as a mapping
/// starts on a page: ggml refuses (aborts on) tensor data that is not aligned.
struct Aligned {
    blocks: Vec<Block>,
    len: usize,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

impl Aligned {
    fn new(bytes: &[u8]) -> Aligned {
        let mut blocks = vec![Block([0; 64]); bytes.len().div_ceil(64)];
        for (block, chunk) in blocks.iter_mut().zip(bytes.chunks(64)) {
            block.0[..chunk.len()].copy_from_slice(chunk);
        }
        Aligned {
            blocks,
            len: bytes.len(),
        }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `blocks` is `len` (rounded up to 64) initialized bytes with no padding.
        unsafe { std::slice::from_raw_parts(self.blocks.as_ptr().cast::<u8>(), self.len) }
    }
}

/// A parsed, validated GGUF file. The file stays memory-mapped: tensor data is
/// read from the page cache on demand, never copied here.
pub struct Gguf {
    bytes: Bytes,
    version: u32,
    metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl std::fmt::Debug for Gguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gguf")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl Gguf {
    /// Maps and validates the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.display().to_string(),
            source,
        };
        // Checked before opening: opening a FIFO or a device can block forever.
        if !std::fs::metadata(path).map_err(io)?.is_file() {
            return Err(io(std::io::Error::other("not a regular file")));
        }
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; a file truncated under us by another process
        // is the one hazard no reader of mapped files can rule out.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Gguf::from_bytes_inner(Bytes::Mapped(map))
    }

    /// Validates an in-memory GGUF (tests, fuzzing), copying it to aligned memory.
    pub fn from_bytes(bytes: impl AsRef<[u8]>) -> Result<Gguf> {
        Gguf::from_bytes_inner(Bytes::Owned(Aligned::new(bytes.as_ref())))
    }

    fn from_bytes_inner(bytes: Bytes) -> Result<Gguf> {
        let parsed = Parser::new(bytes.as_slice()).parse()?;
        Ok(Gguf { bytes, ..parsed })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// All metadata in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The whole file.
    pub fn file_bytes(&self) -> &[u8] {
        self.bytes.as_slice()
    }

    /// Where the data section starts in the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Drops the pages of `range` from the process's resident set, for bytes read
    /// once (metadata, weights copied into another layout): the page cache keeps
    /// them, and reading them again faults them back in. Only whole pages inside the
    /// range go; a GGUF in owned memory is left as it is.
    pub fn release(&self, range: std::ops::Range<usize>) {
        self.bytes.release(range);
    }

    /// Keeps the file's bytes, dropping the parsed metadata and tensor index.
    pub fn into_file_bytes(self) -> FileBytes {
        FileBytes(self.bytes)
    }

    /// Where a tensor's bytes lie in the file (bounds were validated at open).
    pub fn tensor_range(&self, info: &TensorInfo) -> std::ops::Range<usize> {
        let start = (self.data_offset + info.offset) as usize;
        start..start + info.size as usize
    }

    /// A tensor's bytes.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        &self.file_bytes()[self.tensor_range(info)]
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: u64,
    array_elements_left: u64,
}

impl<'a> Parser<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Parser {
            bytes,
            pos: 0,
            array_elements_left: MAX_ARRAY_ELEMENTS,
        }
    }

    fn remaining(&self) -> u64 {
        self.bytes.len() as u64 - self.pos
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what.to_string(),
                offset: self.pos,
                needed: n,
                available: self.remaining(),
            });
        }
        let start = self.pos as usize;
        self.pos += n;
        Ok(&self.bytes[start..start + n as usize])
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        Ok(self.take(N as u64, what)?.try_into().unwrap())
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        if len > MAX_STRING_LEN {
            return Err(malformed(format!(
                "{what}: string length {len} exceeds {MAX_STRING_LEN}"
            )));
        }
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| malformed(format!("{what}: string is not valid UTF-8")))
    }

    fn parse(mut self) -> Result<Gguf> {
        let magic: [u8; 4] = self.array("magic")?;
        if &magic != b"GGUF" {
            return Err(GgufError::BadMagic(magic));
        }
        let version = self.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors = self.u64("tensor count")?;
        let n_kv = self.u64("metadata count")?;
        // The smallest key-value pair takes 8 (key length) + 4 (type) + 1 bytes, the
        // smallest tensor info 8 + 4 + 4 + 8: counts beyond what the file holds are lies.
        if n_kv > self.remaining() / 13 || n_kv > MAX_KEYS {
            return Err(malformed(format!(
                "metadata count {n_kv} is larger than the file could hold (or {MAX_KEYS})"
            )));
        }
        if n_tensors > self.remaining() / 24 || n_tensors > MAX_TENSORS {
            return Err(malformed(format!(
                "tensor count {n_tensors} is larger than the file could hold (or {MAX_TENSORS})"
            )));
        }

        let mut metadata = Vec::with_capacity(n_kv.min(MAX_PREALLOCATED) as usize);
        let mut index = HashMap::with_capacity(n_kv.min(MAX_PREALLOCATED) as usize);
        for i in 0..n_kv {
            let key = self.string(&format!("metadata key #{i}"))?;
            let type_id = self.u32(&format!("type of {key}"))?;
            let value = self.value(type_id, &key, 0)?;
            if index.insert(key.clone(), metadata.len()).is_some() {
                return Err(malformed(format!("duplicate metadata key {key}")));
            }
            metadata.push((key, value));
        }

        let alignment = match index.get("general.alignment").map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
            Some(v) => {
                return Err(malformed(format!(
                    "general.alignment must be a power-of-two u32, got {v:?}"
                )))
            }
        };

        let mut tensors = Vec::with_capacity(n_tensors.min(MAX_PREALLOCATED) as usize);
        let mut tensor_index = HashMap::with_capacity(n_tensors.min(MAX_PREALLOCATED) as usize);
        for i in 0..n_tensors {
            let info = self.tensor_info(i, alignment)?;
            if tensor_index.insert(info.name.clone(), tensors.len()).is_some() {
                return Err(malformed(format!("duplicate tensor name {}", info.name)));
            }
            tensors.push(info);
        }

        let data_offset = self.pos.div_ceil(alignment) * alignment;
        let data_len = (self.bytes.len() as u64).saturating_sub(data_offset);
        validate_layout(&tensors, data_len)?;

        Ok(Gguf {
            bytes: Bytes::Owned(Aligned::new(&[])),
            version,
            metadata,
            index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }

    fn value(&mut self, type_id: u32, key: &str, depth: usize) -> Result<Value> {
        let ty =
            ValueType::from_id(type_id).ok_or_else(|| malformed(format!("{key}: unknown value type {type_id}")))?;
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(key)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(key)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            ValueType::U32 => Value::U32(self.u32(key)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            ValueType::U64 => Value::U64(self.u64(key)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            ValueType::Bool => match self.array::<1>(key)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(malformed(format!("{key}: bool byte is {b}"))),
            },
            ValueType::String => Value::String(self.string(key)?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(malformed(format!("{key}: arrays nested deeper than {MAX_ARRAY_DEPTH}")));
                }
                let elem_type = self.u32(key)?;
                let len = self.u64(key)?;
                let min_elem = ValueType::from_id(elem_type)
                    .ok_or_else(|| malformed(format!("{key}: unknown array element type {elem_type}")))?
                    .scalar_size()
                    .unwrap_or(8);
                if len > self.array_elements_left || len > self.remaining() / min_elem {
                    return Err(malformed(format!(
                        "{key}: array length {len} is larger than the file could hold \
                         (or the {MAX_ARRAY_ELEMENTS} array elements allowed in all)"
                    )));
                }
                self.array_elements_left -= len;
                let mut items = Vec::with_capacity(len.min(MAX_PREALLOCATED) as usize);
                for _ in 0..len {
                    items.push(self.value(elem_type, key, depth + 1)?);
                }
                Value::Array(items)
            }
        })
    }

    fn tensor_info(&mut self, i: u64, alignment: u64) -> Result<TensorInfo> {
        let name = self.string(&format!("tensor #{i} name"))?;
        let n_dims = self.u32(&format!("tensor {name} dimension count"))?;
        if n_dims == 0 || n_dims as usize > MAX_DIMS {
            return Err(malformed(format!(
                "tensor {name}: {n_dims} dimensions (1 to {MAX_DIMS} allowed)"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64(&format!("tensor {name} dimensions"))?);
        }
        let type_id = self.u32(&format!("tensor {name} type"))?;
        let offset = self.u64(&format!("tensor {name} offset"))?;

        let tensor_type = TensorType::from_id(type_id)
            .ok_or_else(|| malformed(format!("tensor {name}: unknown tensor type {type_id}")))?;
        if dims.iter().any(|&d| d == 0 || d > i64::MAX as u64) {
            return Err(malformed(format!("tensor {name}: dimensions {dims:?} out of range")));
        }
        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| malformed(format!("tensor {name}: dimensions {dims:?} overflow")))?;
        let row = tensor_type.row_bytes(dims[0]).ok_or_else(|| {
            malformed(format!(
                "tensor {name}: row length {} is not a multiple of {}'s block size {}",
                dims[0],
                tensor_type,
                tensor_type.block_size()
            ))
        })?;
        let size = row
            .checked_mul(n_elements / dims[0])
            .ok_or_else(|| malformed(format!("tensor {name}: size overflows")))?;
        if offset % alignment != 0 {
            return Err(malformed(format!(
                "tensor {name}: offset {offset} is not aligned to {alignment}"
            )));
        }
        Ok(TensorInfo {
            name,
            dims,
            tensor_type,
            offset,
            size,
        })
    }
}

fn validate_layout(tensors: &[TensorInfo], data_len: u64) -> Result<()> {
    let mut spans: Vec<&TensorInfo> = tensors.iter().collect();
    spans.sort_by_key(|t| t.offset);
    for (i, t) in spans.iter().enumerate() {
        let end = t.offset.checked_add(t.size).filter(|&e| e <= data_len).ok_or_else(|| {
            malformed(format!(
                "tensor {}: data [{}, +{}) lies outside the data section ({} bytes)",
                t.name, t.offset, t.size, data_len
            ))
        })?;
        if let Some(next) = spans.get(i + 1) {
            if end > next.offset {
                return Err(malformed(format!("tensors {} and {} overlap", t.name, next.name)));
            }
        }
    }
    Ok(())
}

fn malformed(msg: String) -> GgufError {
    GgufError::Malformed(msg)
}
