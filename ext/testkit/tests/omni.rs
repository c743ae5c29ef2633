//! A projector with both encoders in one GGUF (Qwen2.5-Omni's `qwen2.5o`,
//! `elelem_testkit::omni`): both loaded from the one file, each encoder float for float as
//! clip.cpp loads and runs it from that file (`ctx_v` as `qwen2.5vl_merger`, `ctx_a` as
//! `qwen2a`), every tensor of the file used by one of them, and the newer files' per-modality
//! type keys read.

use std::path::PathBuf;
use std::sync::Arc;

use elelem_engine::audio::{decode_wav, WhisperMel};
use elelem_engine::vision::{decode, preprocess, Encoder, EncoderParams, Mmproj, ProjectorType};
use elelem_engine::Error;
use elelem_gguf::{Gguf, GgufWriter, TensorType, Value};
use elelem_testkit::{mtmd, omni};

/// The language model's width the synthetic projector projects to.
const N_TEXT_EMBD: u64 = 128;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(dir: &str, file: &str) -> Vec<u8> {
    std::fs::read(root().join("ext/testkit/tests/fixtures").join(dir).join(file)).unwrap()
}

/// The synthetic `qwen2.5o` projector written into the test's own temporary file.
fn write(name: &str, w: &GgufWriter) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("elelem-omni-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.gguf"));
    w.write(&path).unwrap();
    path
}

/// The floats of `ours` that are `theirs`' bit for bit, after checking that all are and
/// that the comparison is not vacuous (the values vary).
fn identical(what: &str, ours: &[f32], theirs: &[f32]) -> usize {
    assert_eq!(ours.len(), theirs.len(), "{what}: sizes");
    let differ = ours
        .iter()
        .zip(theirs)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(
        differ,
        0,
        "{what}: {differ} of {} floats differ from clip.cpp's",
        ours.len()
    );
    let mut bits: Vec<u32> = ours.iter().map(|x| x.to_bits()).collect();
    bits.sort_unstable();
    bits.dedup();
    assert!(bits.len() > ours.len() / 8, "{what}: {} distinct values", bits.len());
    ours.len()
}

/// Both encoders of one file, each against clip.cpp's context of that modality: an image
/// (Qwen2.5-VL's smart resize, window attention) and a second of audio (one 30 s log-mel
/// piece, 750 tokens), with flash attention and without.
#[test]
fn both_encoders_match_clip_cpp() {
    let path = write("qwen25o", &omni::writer(N_TEXT_EMBD));
    let encoders = Mmproj::open_encoders(&path).unwrap();
    let vision = Arc::new(encoders.vision.expect("a vision encoder"));
    let audio = Arc::new(encoders.audio.expect("an audio encoder"));
    assert_eq!(vision.hparams.projector, ProjectorType::Qwen25vl);
    assert_eq!(audio.hparams.projector, ProjectorType::Qwen2a);
    assert_eq!(vision.weights_bytes(), audio.weights_bytes(), "one file's weights");

    let (kind, params) = vision.hparams.preprocessing();
    let pre = preprocess(kind, &params, &decode(&fixture("vision", "160x120-420.jpg")).unwrap()).unwrap();
    let image = &pre.entries[0];
    let mel = WhisperMel::new(audio.hparams.n_mel_bins as usize).unwrap();
    let pieces = mel
        .preprocess(&decode_wav(&fixture("audio", "tones-1s.wav")).unwrap())
        .unwrap();
    assert_eq!(pieces.len(), 1);
    let (mut cases, mut floats) = (0, 0);
    for flash_attn in [true, false] {
        let params = EncoderParams {
            n_threads: 2,
            flash_attn,
        };
        let ours = Encoder::new(Arc::clone(&vision), params)
            .unwrap()
            .encode(image)
            .unwrap();
        let theirs = mtmd::clip_encode(
            &path,
            flash_attn,
            2,
            (image.width(), image.height(), image.data()),
            1 << 24,
        )
        .expect("clip.cpp encodes the image");
        floats += identical(&format!("the image (flash attention {flash_attn})"), &ours, &theirs);
        let ours = Encoder::new(Arc::clone(&audio), params)
            .unwrap()
            .encode_audio(&pieces[0])
            .unwrap();
        assert_eq!(ours.len(), 750 * N_TEXT_EMBD as usize);
        let theirs = mtmd::clip_encode_audio(&path, flash_attn, 2, (pieces[0].n_mel, &pieces[0].data), 1 << 24)
            .expect("clip.cpp encodes the audio");
        floats += identical(&format!("the audio (flash attention {flash_attn})"), &ours, &theirs);
        cases += 2;
    }
    eprintln!("qwen2.5o encoders: {cases} media encoded, {floats} floats, all identical to clip.cpp's");
}

/// What [`Mmproj::load_encoders`] makes of the synthetic projector altered by `alter`.
fn load(alter: impl FnOnce(&mut GgufWriter)) -> Result<elelem_engine::vision::Encoders, Error> {
    let mut w = omni::writer(N_TEXT_EMBD);
    alter(&mut w);
    Mmproj::load_encoders(Gguf::from_bytes(w.to_bytes()).unwrap())
}

/// Newer files name each encoder's type (`clip.vision.projector_type`,
/// `clip.audio.projector_type`) where older ones say `qwen2.5o` once: both load alike.
#[test]
fn per_modality_projector_types_are_read() {
    let s = |v: &str| Value::String(v.to_string());
    let encoders = load(|w| {
        w.remove("clip.projector_type")
            .set("clip.vision.projector_type", s("qwen2.5vl_merger"))
            .set("clip.audio.projector_type", s("qwen2a"));
    })
    .unwrap();
    assert_eq!(encoders.vision.unwrap().hparams.projector, ProjectorType::Qwen25vl);
    assert_eq!(encoders.audio.unwrap().hparams.projector, ProjectorType::Qwen2a);
    // The vision encoder's alone, where the file says no more.
    let only = load(|w| {
        w.set("clip.has_audio_encoder", Value::Bool(false));
    });
    match only {
        Err(Error::Unsupported(m)) => assert!(m.contains("a.") && m.contains("qwen2.5vl_merger"), "{m}"),
        other => panic!("audio tensors no encoder reads were taken: {:?}", other.err()),
    }
}

/// Each encoder's tensors are its own and used (a stray tensor is refused, naming both
/// types), and both encoders' embeddings must be as wide (mtmd's "mismatch between vision
/// and audio mmproj"); an audio encoder of a type elelem does not run is refused by name.
#[test]
fn mismatched_or_stray_encoders_are_refused() {
    let stray = load(|w| {
        w.add_f32("a.stray.weight", &[4], &[0.0; 4]);
    });
    match stray {
        Err(Error::Unsupported(m)) => assert!(m.contains("a.stray.weight") && m.contains("qwen2a"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
    let narrow = load(|w| {
        // The audio projection of a narrower language model's.
        let mut audio = elelem_testkit::audio::writer(&elelem_testkit::audio::Shape {
            n_text_embd: 96,
            ..elelem_testkit::audio::Shape::QWEN2A
        });
        w.remove_tensor("mm.a.fc.weight").remove_tensor("mm.a.fc.bias");
        let weight = audio.tensor_data_mut("mm.a.fc.weight").unwrap().to_vec();
        let bias = audio.tensor_data_mut("mm.a.fc.bias").unwrap().to_vec();
        w.add_tensor("mm.a.fc.weight", &[64, 96], TensorType::F16, weight)
            .add_tensor("mm.a.fc.bias", &[96], TensorType::F32, bias);
    });
    match narrow {
        Err(Error::Load(m)) => assert!(m.contains("mismatch between vision and audio"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
    let ultravox = load(|w| {
        w.remove("clip.projector_type")
            .set("clip.vision.projector_type", Value::String("qwen2.5vl_merger".into()))
            .set("clip.audio.projector_type", Value::String("ultravox".into()));
    });
    match ultravox {
        Err(Error::Unsupported(m)) => assert!(m.contains("ultravox"), "{m}"),
        other => panic!("{:?}", other.err()),
    }
}
