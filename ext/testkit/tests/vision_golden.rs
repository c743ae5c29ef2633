//! Image (and audio) and text prompts identical to llama.cpp's libmtmd end to end
//! (spec/fixtures/goldens/vision, recorded by `rake vision_golden` from the reference's
//! `mtmd` mode): the chunks mtmd cuts a prompt into (each text piece's ids, each image
//! chunk's token count, grid and positions, each audio chunk's token count and
//! positions), each image (audio) chunk's embeddings (their SHA-256), and the greedy ids
//! after the prompt, for each synthetic language model and projector pair of
//! tmp/synthetic/vision.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use elelem_engine::runtime::vision::{MultimodalPrompt, VisionContext, IMAGE_CACHE_ENTRIES};
use elelem_engine::vision::EncoderParams;
use elelem_engine::{
    text::sampler, BatchToken, Batcher, BuildProfile, Chooser, Context, ContextParams, Error, Event, GenerateParams,
    ImageGrid, Model, Request, Summary, TextParams,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The abort flag of a prompt nobody interrupts.
static NEVER: AtomicBool = AtomicBool::new(false);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The recording for this build profile: from the fixture, or the cache `rake goldens`
/// fills from the reference built here (as tests/golden.rs reads it).
fn recording(name: &str, doc: &Value) -> Value {
    let id = BuildProfile::current().expect("the CPU backend loads").id();
    if let Some(rec) = doc["recordings"].get(&id) {
        return rec.clone();
    }
    let cache = std::env::var_os("ELELEM_GOLDEN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/elelem/goldens"));
    let cached = cache.join(&id).join(format!("{name}.json"));
    let text = std::fs::read_to_string(&cached).unwrap_or_else(|_| {
        panic!(
            "vision/{name}.json has no recording for build profile {id}, and {} does not exist: \
             `rake goldens` records it from the reference llama.cpp built here",
            cached.display()
        )
    });
    serde_json::from_str::<Value>(&text).unwrap()["recordings"][&id].clone()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The prompt as mtmd's chunks: `("text", ids)`, `("image", [n_tokens, nx, ny, n_pos])`
/// (the tokens in one row, as mtmd counts them, where the model places them by position),
/// or, from an audio encoder, `("audio", [n_tokens, n_pos])`: every chunk of an audio
/// projector, and of one with both encoders (whose language model places images on a
/// grid, under M-RoPE) those without a grid.
fn chunks(prompt: &MultimodalPrompt, n_embd: usize, vision: &VisionContext) -> Vec<(&'static str, Vec<u32>)> {
    let mut out = Vec::new();
    let mut at = 0;
    let text = |from: usize, to: usize, out: &mut Vec<(&'static str, Vec<u32>)>| {
        if to > from {
            out.push(("text", prompt.ids[from..to].to_vec()));
        }
    };
    for e in &prompt.embeddings {
        text(at, e.start, &mut out);
        let rows = e.embd.len() / n_embd;
        let (nx, ny) = e.grid.unwrap_or((rows as u32, 1));
        let n_pos = e.n_pos(n_embd) as u32;
        let audio = vision.audio() && (!vision.vision() || e.grid.is_none());
        out.push(match audio {
            true => ("audio", vec![rows as u32, n_pos]),
            false => ("image", vec![rows as u32, nx, ny, n_pos]),
        });
        at = e.start + rows;
    }
    text(at, prompt.ids.len(), &mut out);
    out
}

fn sha256(embd: &[f32]) -> String {
    let bytes: Vec<u8> = embd.iter().flat_map(|x| x.to_le_bytes()).collect();
    Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Greedy ids after `prompt`, as the reference decodes them: until end of generation or
/// `max_tokens`; and each step's top-two logit margin.
fn generate(ctx: &mut Context, prompt: MultimodalPrompt, max_tokens: u32) -> (Vec<u32>, Vec<f32>) {
    let margins = Mutex::new(Vec::new());
    let choose = |logits: &[f32]| {
        margins.lock().unwrap().push(sampler::top_two_margin(logits));
        sampler::greedy(logits)
    };
    let tokens = run_with(ctx, prompt, max_tokens, false, Box::new(choose)).tokens;
    (tokens, margins.into_inner().unwrap())
}

/// The request's summary; `reuse_prefix` keeps what the sequence holds of the prompt.
fn run(ctx: &mut Context, prompt: MultimodalPrompt, max_tokens: u32, reuse_prefix: bool) -> Summary {
    run_with(ctx, prompt, max_tokens, reuse_prefix, Box::new(sampler::greedy))
}

/// [`run`], each token chosen by `choose`.
fn run_with(
    ctx: &mut Context,
    prompt: MultimodalPrompt,
    max_tokens: u32,
    reuse_prefix: bool,
    choose: Chooser<'_>,
) -> Summary {
    let mut batcher = Batcher::new(ctx, 1);
    let id = batcher
        .submit(Request {
            prompt: prompt.ids,
            embeddings: prompt.embeddings,
            params: TextParams {
                generate: GenerateParams {
                    max_tokens,
                    reuse_prefix,
                    ..Default::default()
                },
                ..Default::default()
            },
            logprobs: None,
            choose: Some(choose),
            constraint: None,
        })
        .unwrap();
    loop {
        match batcher.next_event(id).unwrap() {
            Some(Event::Done { summary, .. }) => return summary,
            Some(_) => {}
            None => {
                batcher.step(ctx).unwrap();
            }
        }
    }
}

/// A synthetic pair of tmp/synthetic/vision: its model and projector.
fn open_pair(name: &str, threads: usize) -> (Arc<Model>, VisionContext) {
    let dir = root().join("tmp/synthetic/vision");
    let model = Arc::new(Model::open(dir.join(format!("{name}.gguf")), &Default::default()).unwrap());
    let vision = VisionContext::open(
        &dir.join(format!("{name}.mmproj.gguf")),
        &model,
        EncoderParams {
            n_threads: threads,
            ..Default::default()
        },
    )
    .unwrap();
    (model, vision)
}

/// A case's image (or, a `.wav`, `.mp3` or `.flac`, audio) file.
fn image(file: &str) -> Vec<u8> {
    let dir = if file.ends_with(".wav") {
        "ext/testkit/tests/fixtures/audio"
    } else if file.ends_with(".mp3") || file.ends_with(".flac") {
        "spec/fixtures/audio"
    } else {
        "ext/testkit/tests/fixtures/vision"
    };
    std::fs::read(root().join(dir).join(file)).unwrap()
}

fn check_pair(name: &str) {
    let fixture = root().join(format!("spec/fixtures/goldens/vision/{name}.json"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    let rec = recording(name, &doc);
    let threads = doc["n_threads"].as_u64().unwrap() as usize;
    let (model, vision) = open_pair(name, threads);
    let params = ContextParams {
        n_ctx: doc["n_ctx"].as_u64().unwrap() as u32,
        n_threads: threads,
        ..Default::default()
    };
    let capacity = (params.n_ctx_seq(), params.capacity_words());
    let ctx = Mutex::new(Context::new(Arc::clone(&model), params).unwrap());
    let n_embd = model.hparams.n_embd_inp() as usize;
    for case in doc["cases"].as_array().unwrap() {
        let case_name = case["name"].as_str().unwrap();
        let out = &rec["outputs"][case_name];
        let images: Vec<Vec<u8>> = case["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| image(i["file"].as_str().unwrap()))
            .collect();
        let images: Vec<&[u8]> = images.iter().map(Vec::as_slice).collect();
        let prompt = vision
            .prompt(
                &model,
                case["prompt_text"].as_str().unwrap(),
                &[],
                &images,
                (capacity.0, &capacity.1),
                &NEVER,
            )
            .unwrap();
        let expected_chunks: Vec<(&str, Vec<u32>)> = case["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| match c["type"].as_str().unwrap() {
                "text" => ("text", ids(&c["ids"])),
                "audio" => (
                    "audio",
                    ["n_tokens", "n_pos"]
                        .iter()
                        .map(|k| c[*k].as_u64().unwrap() as u32)
                        .collect(),
                ),
                _ => (
                    "image",
                    ["n_tokens", "nx", "ny", "n_pos"]
                        .iter()
                        .map(|k| c[*k].as_u64().unwrap() as u32)
                        .collect(),
                ),
            })
            .collect();
        assert_eq!(
            chunks(&prompt, n_embd, &vision),
            expected_chunks,
            "{name} {case_name}: mtmd's chunks"
        );
        assert_eq!(
            prompt.n_pos as u64,
            case["n_past"].as_u64().unwrap(),
            "{name} {case_name}: the positions the prompt takes"
        );
        let hashes: Vec<String> = prompt.embeddings.iter().map(|e| sha256(&e.embd)).collect();
        let expected_hashes: Vec<String> = out["embd_sha256"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            hashes, expected_hashes,
            "{name} {case_name}: the image (audio) chunks' embeddings"
        );
        let max_tokens = case["max_tokens"].as_u64().unwrap() as u32;
        let (got, margins) = generate(&mut ctx.lock().unwrap(), prompt, max_tokens);
        assert_eq!(got, ids(&out["ids"]), "{name} {case_name}: the greedy ids");
        // The driver prints them with 9 significant digits, which give an f32 back exactly:
        // the logits' margins compared bit for bit, which see what the ids may not (the
        // audio pairs' ids repeat one token whatever the positions).
        let expected_margins: Vec<f32> = out["margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(
            margins, expected_margins,
            "{name} {case_name}: each step's top-two logit margin"
        );
    }
}

#[test]
fn gemma3_image_prompts_match_mtmd() {
    check_pair("tiny-gemma3-vision");
}

#[test]
fn idefics3_image_prompts_match_mtmd() {
    check_pair("tiny-idefics3-vision");
}

#[test]
fn lfm2_image_prompts_match_mtmd() {
    check_pair("tiny-lfm2-vision");
}

#[test]
fn llava_image_prompts_match_mtmd() {
    check_pair("tiny-llava-vision");
}

#[test]
fn mobilevlm_image_prompts_match_mtmd() {
    check_pair("tiny-mobilevlm-vision");
}

#[test]
fn internvl_image_prompts_match_mtmd() {
    check_pair("tiny-internvl-vision");
}

#[test]
fn qwen2vl_image_prompts_match_mtmd() {
    check_pair("tiny-qwen2vl-vision");
}

#[test]
fn qwen3vl_image_prompts_match_mtmd() {
    check_pair("tiny-qwen3vl-vision");
}

#[test]
fn qwen3vlmoe_image_prompts_match_mtmd() {
    check_pair("tiny-qwen3vlmoe-vision");
}

/// A Qwen3-VL projector gives each token its main path's embedding and its deepstack
/// layers': a language model whose input rows are not `n_embd · (1 + n_deepstack_layers)`
/// wide (Qwen2-VL's 128, for the projector's 3 x 128) is refused at open, naming both widths.
#[test]
fn a_qwen3vl_projector_needs_its_deepstack_model() {
    let dir = root().join("tmp/synthetic/vision");
    let model = Model::open(dir.join("tiny-qwen2vl-vision.gguf"), &Default::default()).unwrap();
    let refused = VisionContext::open(
        &dir.join("tiny-qwen3vl-vision.mmproj.gguf"),
        &model,
        EncoderParams::default(),
    );
    let Err(Error::Load(msg)) = refused else {
        panic!("the mismatched pair opened");
    };
    assert!(msg.contains("384") && msg.contains("128"), "{msg}");
}

#[test]
fn qwen25vl_image_prompts_match_mtmd() {
    check_pair("tiny-qwen25vl-vision");
}

#[test]
fn pixtral_image_prompts_match_mtmd() {
    check_pair("tiny-pixtral-vision");
}

#[test]
fn llama4_image_prompts_match_mtmd() {
    check_pair("tiny-llama4-vision");
}

#[test]
fn gemma4v_image_prompts_match_mtmd() {
    check_pair("tiny-gemma4-vision");
}

/// Qwen2-Audio's projector beside a Qwen2 language model: WAV files (a second of tones,
/// a quarter of noise) in 30 s log-mel pieces of 750 tokens, a position each.
#[test]
fn qwen2a_audio_prompts_match_mtmd() {
    check_pair("tiny-qwen2a-audio");
}

/// The same beside a Qwen2-VL language model: under M-RoPE an audio chunk's tokens take a
/// position each on every axis, as text's (mtmd's `set_position_mrope_1d`), not a grid.
#[test]
fn qwen2a_audio_prompts_under_mrope_match_mtmd() {
    check_pair("tiny-qwen2a-mrope-audio");
}

/// Qwen2.5-Omni's projector (`qwen2.5o`: a Qwen2.5-VL vision encoder and a Qwen2-Audio one
/// in one file) beside a Qwen2-VL language model: an image, a WAV, and both in one prompt in
/// either order, each medium told by its bytes and encoded by its own encoder.
#[test]
fn qwen25o_image_and_audio_prompts_match_mtmd() {
    check_pair("tiny-qwen25o-omni");
}

/// Under M-RoPE an image's rows share one position: `decode_image` refuses what mtmd's
/// helper never asks (rows past the grid, rows of two sequences, a model of one position a
/// token), a sequence cannot be cut within an image (nor is a prefix reused to within one),
/// and cut at its start it takes the image again, to the same logits.
#[test]
fn image_rows_on_a_grid_are_refused_where_they_do_not_fit() {
    let (model, _) = open_pair("tiny-qwen2vl-vision", 2);
    let params = ContextParams {
        n_ctx: 256,
        n_threads: 2,
        n_seq_max: 2,
        ..Default::default()
    };
    let mut ctx = Context::new(Arc::clone(&model), params.clone()).unwrap();
    let n_embd = model.hparams.n_embd as usize;
    let image: Vec<f32> = (0..6 * n_embd).map(|i| ((i % 7) as f32 - 3.0) * 0.01).collect();
    let rows = |from: usize, n: usize| &image[from * n_embd..(from + n) * n_embd];
    let batch = |n: usize, seq: u32| -> Vec<BatchToken> {
        (0..n)
            .map(|i| BatchToken {
                token: 1,
                seq,
                output: i + 1 == n,
            })
            .collect()
    };
    let invalid = |r: Result<(), Error>| assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    let grid = ImageGrid { nx: 3, ny: 2, first: 0 };

    ctx.decode_batch(&batch(3, 0)).unwrap();
    ctx.decode_image(&batch(4, 0), rows(0, 4), true, grid).unwrap();
    invalid(ctx.decode_image(&batch(3, 0), rows(3, 3), true, ImageGrid { first: 4, ..grid }));
    invalid(ctx.seq_truncate(0, 5));
    let mut two = batch(2, 0);
    two[1].seq = 1;
    invalid(ctx.decode_image(&two, rows(4, 2), true, ImageGrid { first: 4, ..grid }));
    ctx.decode_image(&batch(2, 0), rows(4, 2), true, ImageGrid { first: 4, ..grid })
        .unwrap();
    ctx.decode_batch(&batch(1, 0)).unwrap();
    let after = ctx.logits().to_vec();

    let held = ctx.seq_tokens(0).to_vec();
    assert_eq!(ctx.reusable_prefix(0, &held[..6]), 3, "not within the image");
    ctx.seq_truncate(0, 3).unwrap();
    ctx.decode_image(&batch(6, 0), rows(0, 6), true, grid).unwrap();
    ctx.decode_batch(&batch(1, 0)).unwrap();
    assert_eq!(ctx.logits(), after.as_slice(), "the image again, in one pass");

    let (gemma3, _) = open_pair("tiny-gemma3-vision", 2);
    let mut ctx = Context::new(gemma3, params).unwrap();
    invalid(ctx.decode_image(&batch(6, 0), rows(0, 6), true, grid));
}

/// An image sent again is not encoded again (the same embeddings, by the hash of its
/// bytes), until [`IMAGE_CACHE_ENTRIES`] others have come since; and a sequence that holds
/// a prompt with images gives them to the next prompt that starts with it (the next turn of
/// a chat), which then evaluates only what follows.
#[test]
fn images_are_encoded_once_and_their_rows_reused() {
    let (model, vision) = open_pair("tiny-idefics3-vision", 2);
    let jpeg = image("160x120-420.jpg");
    let first = vision.encode(&jpeg).unwrap();
    assert!(Arc::ptr_eq(&first, &vision.encode(&jpeg).unwrap()));
    for i in 0..IMAGE_CACHE_ENTRIES {
        let mut other = image("47x31-rgba-16bit.png");
        // A byte after the PNG's end: other bytes, the same picture.
        other.push(i as u8);
        vision.encode(&other).unwrap();
    }
    let again = vision.encode(&jpeg).unwrap();
    assert!(
        !Arc::ptr_eq(&first, &again),
        "evicted after {IMAGE_CACHE_ENTRIES} others"
    );
    assert_eq!(first.embeddings, again.embeddings);

    let params = ContextParams {
        n_ctx: 4096,
        n_threads: 2,
        ..Default::default()
    };
    let capacity = (params.n_ctx_seq(), params.capacity_words());
    let capacity = (capacity.0, capacity.1.as_str());
    let mut ctx = Context::new(Arc::clone(&model), params).unwrap();
    let turn = vision
        .prompt(&model, "describe <__media__>", &[], &[&jpeg], capacity, &NEVER)
        .unwrap();
    let n_turn = turn.ids.len();
    run(&mut ctx, turn, 4, true);
    let next = vision
        .prompt(
            &model,
            "describe <__media__> and then more",
            &[],
            &[&jpeg],
            capacity,
            &NEVER,
        )
        .unwrap();
    assert_eq!(run(&mut ctx, next, 4, true).reused_tokens, n_turn);
}

/// A prompt whose media take more tokens than a sequence holds is refused before any of
/// them is encoded (an hour of audio would be 120 pieces to encode): nothing is cached.
#[test]
fn media_that_do_not_fit_are_refused_before_encoding() {
    let (model, vision) = open_pair("tiny-qwen2a-audio", 2);
    let wav = image("tones-1s.wav");
    let refused = vision.prompt(
        &model,
        "listen to <__media__>",
        &[],
        &[&wav],
        (700, "n_ctx 700"),
        &NEVER,
    );
    match refused {
        Err(elelem_engine::Error::ContextFull(message)) => {
            assert_eq!(message, "763 tokens do not fit: the sequence holds 0 of n_ctx 700");
        }
        other => panic!("{:?}", other.err()),
    }
    let (_, seconds) = vision.encode_until(&wav, &NEVER).unwrap();
    assert!(seconds > 0.0, "the refused prompt's audio was encoded and kept");
    let fits = vision.prompt(
        &model,
        "listen to <__media__>",
        &[],
        &[&wav],
        (763, "n_ctx 763"),
        &NEVER,
    );
    assert_eq!(fits.unwrap().ids.len(), 763);
}

/// An encode stops once its abort flag is set (an interrupt, from another thread), and
/// keeps nothing: the next encode of the image runs whole.
#[test]
fn an_aborted_encode_keeps_nothing() {
    let (_, vision) = open_pair("tiny-gemma3-vision", 2);
    let jpeg = image("97x61-cmyk.jpg");
    let aborted = vision.encode_until(&jpeg, &AtomicBool::new(true));
    assert!(
        matches!(aborted, Err(elelem_engine::Error::Aborted)),
        "{:?}",
        aborted.err()
    );
    assert_eq!(vision.encode(&jpeg).unwrap().embeddings.len(), 1);
}

/// An audio file sent again is not encoded again (its pieces' embeddings, by the hash of its
/// bytes), as an image is; an aborted encode keeps nothing; and an audio projector reads
/// WAV files only (an image is `Error::Audio`, never decoded as a picture).
#[test]
fn audio_is_encoded_once_and_only_from_audio_files() {
    let (_, audio) = open_pair("tiny-qwen2a-audio", 2);
    assert!(audio.audio());
    let wav = image("tones-1s.wav");
    let first = audio.encode(&wav).unwrap();
    assert!(Arc::ptr_eq(&first, &audio.encode(&wav).unwrap()));
    assert_eq!(first.embeddings.len(), 1, "a second of audio: one piece");
    let noise = image("noise-0.25s.wav");
    let aborted = audio.encode_until(&noise, &AtomicBool::new(true));
    assert!(matches!(aborted, Err(Error::Aborted)), "{:?}", aborted.err());
    assert_eq!(audio.encode(&noise).unwrap().embeddings.len(), 1);
    let refused = audio.encode(&image("97x61-cmyk.jpg"));
    assert!(matches!(refused, Err(Error::Audio(_))), "{:?}", refused.err());
    assert_eq!(
        audio
            .encode(&image("tones-8k-mono-24bit.flac"))
            .unwrap()
            .embeddings
            .len(),
        1
    );
    // An MP3 or FLAC file on a projector without an audio encoder is audio, not an image.
    let (_, vision) = open_pair("tiny-gemma3-vision", 2);
    for file in ["tones-16k-mono-cbr32.mp3", "tones-8k-mono-24bit.flac", "tones-1s.wav"] {
        let refused = vision.encode(&image(file));
        assert!(
            matches!(&refused, Err(Error::Image(m)) if m.contains("is audio")),
            "{file}: {:?}",
            refused.err()
        );
    }
}
