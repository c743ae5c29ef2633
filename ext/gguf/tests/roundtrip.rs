use elelem_gguf::{Gguf, GgufError, GgufWriter, TensorType, Value};

fn sample() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()))
        .set("llama.block_count", Value::U32(2))
        .set("llama.rope.freq_base", Value::F32(10000.0))
        .set(
            "tokenizer.ggml.tokens",
            Value::Array(vec![Value::String("a".into()), Value::String("b".into())]),
        )
        .add_f32("w", &[4, 2], &[1., 2., 3., 4., 5., 6., 7., 8.])
        .add_f32("b", &[3], &[9., 10., 11.]);
    w
}

#[test]
fn written_files_read_back() {
    let g = Gguf::from_bytes(sample().to_bytes()).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.get("general.architecture").unwrap().as_str(), Some("llama"));
    assert_eq!(g.get("llama.block_count").unwrap().as_u64(), Some(2));
    assert_eq!(g.get("tokenizer.ggml.tokens").unwrap().as_array().unwrap().len(), 2);
    let w = g.tensor("w").unwrap();
    assert_eq!(w.dims, vec![4, 2]);
    assert_eq!(w.tensor_type, TensorType::F32);
    assert_eq!(g.tensor_data(w).len(), 32);
    let b = g.tensor("b").unwrap();
    assert_eq!(b.offset % 32, 0);
    let floats: Vec<f32> = g
        .tensor_data(b)
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(floats, vec![9., 10., 11.]);
}

#[test]
fn every_truncation_is_an_error_not_a_panic() {
    let bytes = sample().to_bytes();
    for len in 0..bytes.len() - 1 {
        // Dropping padding at the very end still leaves all tensor data in place.
        let last_data_end = bytes.len() - 20;
        match Gguf::from_bytes(&bytes[..len]) {
            Err(_) => {}
            Ok(_) => assert!(len >= last_data_end, "truncated to {len} bytes but accepted"),
        }
    }
}

#[test]
fn rejects_bad_magic_and_version() {
    let mut bytes = sample().to_bytes();
    bytes[0] = b'X';
    assert!(matches!(Gguf::from_bytes(bytes), Err(GgufError::BadMagic(_))));
    let mut bytes = sample().to_bytes();
    bytes[4] = 9;
    assert!(matches!(Gguf::from_bytes(bytes), Err(GgufError::UnsupportedVersion(9))));
}

#[test]
fn rejects_huge_counts() {
    let mut bytes = sample().to_bytes();
    bytes[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = Gguf::from_bytes(bytes).unwrap_err().to_string();
    assert!(err.contains("tensor count"), "{err}");
}

#[test]
fn rejects_tensor_data_outside_the_file() {
    let mut w = GgufWriter::new();
    w.add_f32("x", &[8], &[0.0; 8]);
    let mut bytes = w.to_bytes();
    // After the name "x": dimension count (4), one dimension (8), type (4), then the offset.
    let name_at = bytes.iter().rposition(|&b| b == b'x').unwrap();
    let offset_at = name_at + 1 + 4 + 8 + 4;
    bytes[offset_at..offset_at + 8].copy_from_slice(&64u64.to_le_bytes());
    let err = Gguf::from_bytes(bytes).unwrap_err().to_string();
    assert!(err.contains("outside the data section"), "{err}");
}

#[test]
fn missing_file_names_the_path() {
    let err = Gguf::open("/nonexistent/model.gguf").unwrap_err().to_string();
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");
}

#[test]
fn in_memory_tensor_data_is_aligned_like_a_mapping() {
    let bytes = sample().to_bytes();
    for shift in 0..4 {
        // Copies that start at odd addresses must still give aligned tensor data.
        let mut padded = vec![0u8; shift];
        padded.extend_from_slice(&bytes);
        let g = Gguf::from_bytes(&padded[shift..]).unwrap();
        assert_eq!(g.file_bytes().as_ptr() as usize % 32, 0);
    }
}

#[test]
fn refuses_what_is_not_a_regular_file() {
    let err = Gguf::open("/tmp").unwrap_err().to_string();
    assert!(err.contains("not a regular file"), "{err}");
    // Opening a FIFO for reading would wait for a writer forever.
    let dir = std::env::temp_dir().join(format!("elelem-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("model.gguf");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let err = Gguf::open(&fifo).unwrap_err().to_string();
    assert!(err.contains("not a regular file"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn array_elements_are_budgeted_for_the_whole_file() {
    let mut w = GgufWriter::new();
    // Each array is within any per-array bound; together they exceed the file's budget.
    for i in 0..3 {
        w.set(&format!("a{i}"), Value::Array(vec![Value::U8(0); 1448 << 10]));
    }
    let err = Gguf::from_bytes(w.to_bytes()).unwrap_err().to_string();
    assert!(err.contains("a2: array length"), "{err}");
}

#[test]
fn released_pages_read_back_the_same() {
    let mut w = sample();
    let big: Vec<f32> = (0..64 * 1024).map(|i| i as f32).collect();
    w.add_f32("big", &[64 * 1024], &big);
    let path = std::env::temp_dir().join(format!("elelem-release-{}.gguf", std::process::id()));
    std::fs::write(&path, w.to_bytes()).unwrap();
    let g = Gguf::open(&path).unwrap();
    let before = g.file_bytes().to_vec();
    g.release(g.tensor_range(g.tensor("big").unwrap()));
    g.release(0..g.file_bytes().len());
    assert_eq!(g.file_bytes(), &before[..]);
    let bytes = g.into_file_bytes();
    assert_eq!(bytes.as_slice(), &before[..]);
    std::fs::remove_file(&path).unwrap();
}
