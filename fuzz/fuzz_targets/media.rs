//! Any bytes as a prompt's image or audio file, told apart as a projector with both encoders
//! tells them (`audio::is_audio`, mtmd-helper's rule). An image is decoded, then preprocessed
//! by a preprocessor family with the parameters clip.cpp gives its models; audio is decoded
//! (WAV, or MP3 and FLAC by the pinned llama.cpp's miniaudio), mixed down and resampled to
//! 16 kHz. Each step gives its result or an image or audio error; anything else (a panic, a
//! crash, another error) is a finding. The log-mel spectrogram after it is left out: it is
//! arithmetic over any samples, seconds of it under ASan for each input.
#![no_main]

use elelem_engine::{audio, vision, Error, Result};
use elelem_testkit::preprocessors;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if audio::is_audio(data) {
        expected(audio::decode_audio(data));
    } else if let Some(image) = expected(vision::decode(data)) {
        // One family an input (chosen by its length), so that an input costs one preprocessing.
        let configs = preprocessors::configs();
        let (_, kind, params) = &configs[data.len() % configs.len()];
        expected(vision::preprocess(*kind, params, &image));
    }
});

/// The result, or `None` for an image or audio error: the refusals bad media may get.
fn expected<T>(result: Result<T>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(Error::Image(_) | Error::Audio(_)) => None,
        Err(e) => panic!("media gave an error other than an image or audio error: {e:?}"),
    }
}
