//! The engine's audio input (`elelem_engine::audio`) against the pinned llama.cpp's
//! (`elelem_testkit::mtmd`: miniaudio's decoder as mtmd-helper calls it, and
//! `tools/mtmd/mtmd-audio.cpp`'s whisper preprocessor): WAV, MP3 and FLAC files must decode to the same
//! samples, and audio of many lengths and kinds (speech-like tones, silence, full-scale
//! noise) to the same log-mel pieces, `f32` for `f32`, for 80 and 128 mel bands. And the
//! synthetic audio projectors (`elelem_testkit::audio`) as clip.cpp runs them.

use std::io::Cursor;
use std::path::PathBuf;

use std::sync::Arc;

use elelem_engine::audio::{self, Mel, WhisperMel, FRAMES_PER_CHUNK};
use elelem_engine::vision::{Encoder, EncoderParams, Mmproj};
use elelem_engine::Error;
use elelem_gguf::{GgufWriter, TensorType, Value};
use elelem_testkit::audio as audio_mmproj;
use elelem_testkit::mtmd;
use elelem_testkit::xorshift::XorShift;

/// The kinds of audio compared.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Three tones gliding, an envelope, a little noise: what speech's spectrum looks like.
    Tones,
    /// All zeros (the spectrogram is the floor everywhere).
    Silence,
    /// Independent samples over the whole 16-bit range.
    Noise,
}

/// `n` samples of `kind`, as 16-bit PCM.
fn pcm16(kind: Kind, n: usize, seed: u64) -> Vec<i16> {
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..n)
        .map(|i| match kind {
            Kind::Silence => 0,
            Kind::Noise => (rng.next_u64() >> 48) as u16 as i16,
            Kind::Tones => {
                let t = i as f64 / 16_000.0;
                let glide = |f0: f64, f1: f64| (2.0 * std::f64::consts::PI * (f0 * t + (f1 - f0) * t * t / 8.0)).sin();
                let envelope = 0.5 + 0.5 * (2.0 * std::f64::consts::PI * 3.0 * t).sin();
                let noise = (rng.next_u64() >> 40) as f64 / f64::from(1u32 << 24) - 0.5;
                let x = envelope
                    * (0.4 * glide(220.0, 330.0) + 0.2 * glide(1400.0, 900.0) + 0.1 * glide(3100.0, 5200.0))
                    + 0.02 * noise;
                (x * 32767.0).round() as i16
            }
        })
        .collect()
}

/// A WAV file of `samples` at `rate` with `channels` interleaved.
fn wav16(samples: &[i16], rate: u32, channels: u16) -> Vec<u8> {
    wav_of(samples, rate, channels, 16, hound::SampleFormat::Int)
}

/// A WAV file of `samples` (interleaved `channels`) at `rate`, written as `bits`-bit
/// samples of `format`.
fn wav_of<S: hound::Sample + Copy>(
    samples: &[S],
    rate: u32,
    channels: u16,
    bits: u16,
    format: hound::SampleFormat,
) -> Vec<u8> {
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: bits,
        sample_format: format,
    };
    let mut bytes = Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut bytes, spec).unwrap();
    for &s in samples {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
    bytes.into_inner()
}

/// The lengths compared, in samples: shorter than mtmd's window (zero-padded), one
/// window, 0.1 s, 1 s, just under and at 30 s (one piece, then two), 45 s, and around a
/// piece's edge.
const LENGTHS: &[usize] = &[2, 150, 201, 1_600, 16_000, 478_400, 479_999, 480_000, 720_000];

#[test]
fn wav_files_decode_to_mtmd_helpers_samples() {
    let mut floats = 0;
    for (i, &n) in [1usize, 2, 1_600, 16_000, 160_001].iter().enumerate() {
        for kind in [Kind::Tones, Kind::Silence, Kind::Noise] {
            let bytes = wav16(&pcm16(kind, n, i as u64), 16_000, 1);
            let ours = audio::decode_wav(&bytes).unwrap();
            let theirs = mtmd::miniaudio_decode(&bytes, 16_000, n + 16).expect("miniaudio decodes it");
            assert_eq!(ours.len(), theirs.len(), "{kind:?} {n}");
            let same = ours
                .iter()
                .zip(&theirs)
                .filter(|(a, b)| a.to_bits() == b.to_bits())
                .count();
            assert_eq!(
                same,
                ours.len(),
                "{kind:?} {n}: {} of {} samples differ",
                ours.len() - same,
                ours.len()
            );
            floats += same;
        }
    }
    // Channels mixed down to mono as miniaudio does (2, 3 and 6 of them).
    for channels in [2u16, 3, 6] {
        let bytes = wav16(&pcm16(Kind::Noise, 4_800, u64::from(channels)), 16_000, channels);
        let ours = audio::decode_wav(&bytes).unwrap();
        let theirs = mtmd::miniaudio_decode(&bytes, 16_000, 5_000).expect("miniaudio decodes it");
        assert_eq!(ours.len(), 4_800 / usize::from(channels));
        assert!(
            ours.iter().map(|x| x.to_bits()).eq(theirs.iter().map(|x| x.to_bits())),
            "{channels} channels"
        );
        floats += ours.len();
    }
    // 32-bit float WAV, passed through.
    let samples: Vec<f32> = pcm16(Kind::Tones, 4_000, 9)
        .iter()
        .map(|&s| f32::from(s) / 30_000.0)
        .collect();
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut bytes = Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut bytes, spec).unwrap();
    for &s in &samples {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
    let bytes = bytes.into_inner();
    let ours = audio::decode_wav(&bytes).unwrap();
    let theirs = mtmd::miniaudio_decode(&bytes, 16_000, 5_000).unwrap();
    assert!(ours.iter().map(|x| x.to_bits()).eq(theirs.iter().map(|x| x.to_bits())));
    floats += ours.len();
    eprintln!("WAV decoding: {floats} samples, all identical to miniaudio's");
}

/// The signals resampled.
#[derive(Clone, Copy, Debug)]
enum Signal {
    /// All zeros.
    Silence,
    /// Two tones just under the Nyquist frequencies, the file's and 16 kHz's (where the
    /// low-pass filter works hardest), each channel its own phase.
    NearNyquist,
    /// Independent full-scale samples.
    Noise,
    /// A full-scale 1 kHz square wave (clipping at both ends of the range).
    Square,
}

/// `frames` frames of `signal` at `rate` over `channels` interleaved, in [-1, 1].
fn signal(signal: Signal, frames: usize, channels: u16, rate: u32, seed: u64) -> Vec<f32> {
    let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let (rate, n) = (f64::from(rate), usize::from(channels));
    (0..frames * n)
        .map(|i| {
            let (t, c) = ((i / n) as f64 / rate, (i % n) as f64);
            match signal {
                Signal::Silence => 0.0,
                Signal::Noise => (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0,
                Signal::NearNyquist => {
                    let tone = |f: f64| (2.0 * std::f64::consts::PI * f * t + c).sin();
                    (0.45 * tone(0.47 * rate) + 0.45 * tone((0.49 * rate).min(7_900.0))) as f32
                }
                Signal::Square => {
                    if (t * 1_000.0 + c * 0.1).fract() < 0.5 {
                        1.0
                    } else {
                        -1.0
                    }
                }
            }
        })
        .collect()
}

/// A WAV file of interleaved `samples` at `rate`: 16-bit PCM (full scale to -32768 and
/// 32767) or 32-bit float.
fn wav(samples: &[f32], rate: u32, channels: u16, float: bool) -> Vec<u8> {
    if !float {
        let pcm: Vec<i16> = samples
            .iter()
            .map(|&x| (f64::from(x) * 32768.0).round().clamp(-32768.0, 32767.0) as i16)
            .collect();
        return wav16(&pcm, rate, channels);
    }
    wav_of(samples, rate, channels, 32, hound::SampleFormat::Float)
}

/// Our samples of an audio file against miniaudio's ([`mtmd::compare_decoding`]), or a
/// panic naming the file and the first difference. The count of samples.
fn assert_decodes_as_miniaudio(bytes: &[u8], what: &str) -> usize {
    mtmd::compare_decoding(bytes).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The rates compared: the common ones down to 16 kHz, up from 8 and 11.025 kHz, and the
/// edges (1 Hz, a rate prime to 16 kHz just above it, 384 kHz).
const RATES: &[u32] = &[
    8_000, 11_025, 22_050, 24_000, 32_000, 44_100, 48_000, 96_000, 1, 16_001, 384_000,
];

/// WAV files of other rates than 16 kHz, resampled as miniaudio's decoder does it for
/// mtmd-helper: 1, 2 and 6 channels, 16-bit and float, silence, tones near Nyquist, noise
/// and a full-scale square, from 1 frame to 40 s, the same samples bit for bit.
#[test]
fn wav_files_are_resampled_as_miniaudio_does() {
    let (mut files, mut samples) = (0usize, 0usize);
    for (r, &rate) in RATES.iter().enumerate() {
        // 1, 2 and 3 frames (the resampler's start and miniaudio's length rule), an odd
        // count, 0.1 s and a little more than 1 s.
        let lengths = [1, 2, 3, 157, (rate / 10).max(4) as usize, rate as usize + 7];
        for channels in [1u16, 2, 6] {
            for float in [false, true] {
                for kind in [Signal::Silence, Signal::NearNyquist, Signal::Noise, Signal::Square] {
                    for (l, &frames) in lengths.iter().enumerate() {
                        if rate == 1 && frames > 3 {
                            continue;
                        }
                        let seed = (r * 1000 + l * 100 + usize::from(channels) * 10) as u64;
                        let bytes = wav(&signal(kind, frames, channels, rate, seed), rate, channels, float);
                        let what = format!(
                            "{rate} Hz, {channels} channels, {}, {kind:?}, {frames} frames",
                            if float { "float" } else { "16-bit" }
                        );
                        samples += assert_decodes_as_miniaudio(&bytes, &what);
                        files += 1;
                    }
                }
            }
        }
        // 40 s: noise in 16-bit mono, tones near Nyquist in float stereo.
        if rate >= 8_000 {
            let frames = 40 * rate as usize + 3;
            for (kind, channels, float) in [(Signal::Noise, 1, false), (Signal::NearNyquist, 2, true)] {
                let bytes = wav(
                    &signal(kind, frames, channels, rate, rate.into()),
                    rate,
                    channels,
                    float,
                );
                samples += assert_decodes_as_miniaudio(&bytes, &format!("{rate} Hz, 40 s of {kind:?}"));
                files += 1;
            }
        }
    }
    eprintln!("resampling: {files} files, {samples} samples, all identical to miniaudio's");
}

/// A 44.1 kHz WAV's log-mel pieces are mtmd's from miniaudio's samples of it.
#[test]
fn a_44_1_khz_wavs_log_mel_is_mtmds() {
    let samples: Vec<i16> = pcm16(Kind::Tones, 44_100 * 3, 11);
    let bytes = wav16(&samples, 44_100, 1);
    let theirs_samples = mtmd::miniaudio_decode(&bytes, 16_000, 50_000).expect("miniaudio decodes it");
    let theirs = mtmd::whisper_mel(80, &theirs_samples).expect("mtmd preprocesses it");
    let ours: Vec<f32> = WhisperMel::new(80)
        .unwrap()
        .preprocess(&audio::decode_wav(&bytes).unwrap())
        .unwrap()
        .into_iter()
        .flat_map(|m| m.data)
        .collect();
    assert_eq!(ours.len(), theirs.len());
    assert!(
        ours.iter().map(|x| x.to_bits()).eq(theirs.iter().map(|x| x.to_bits())),
        "the log-mel of a 44.1 kHz file differs from mtmd's"
    );
    eprintln!("44.1 kHz log-mel: {} floats, all identical to mtmd's", ours.len());
}

#[test]
fn other_wav_files_are_refused_by_name() {
    let tone = pcm16(Kind::Tones, 3_200, 1);
    // A mono 16-bit header's rate and bytes a second (which hound checks against it).
    let rate = |rate: u32| {
        let mut bytes = wav16(&tone, 16_000, 1);
        bytes[24..28].copy_from_slice(&rate.to_le_bytes());
        bytes[28..32].copy_from_slice(&(2 * rate).to_le_bytes());
        bytes
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            rate(0),
            "0 Hz, 1 channel, 16-bit integer PCM: elelem takes sample rates from 1 Hz",
        ),
        (rate(384_001), "384001 Hz"),
        (rate(2_000_000_000), "2000000000 Hz"),
        // 16000 times as many samples as frames: more than two hours from 7201 frames.
        (
            wav16(&vec![0; 7_201], 1, 1),
            "up-sampled to 16 kHz would be 115216000 samples",
        ),
        (
            {
                let spec = hound::WavSpec {
                    channels: 1,
                    sample_rate: 16_000,
                    bits_per_sample: 24,
                    sample_format: hound::SampleFormat::Int,
                };
                let mut bytes = Cursor::new(Vec::new());
                let mut w = hound::WavWriter::new(&mut bytes, spec).unwrap();
                for &s in &tone {
                    w.write_sample(i32::from(s) << 8).unwrap();
                }
                w.finalize().unwrap();
                bytes.into_inner()
            },
            "24-bit integer PCM",
        ),
        (b"OggS\0\0\0\0\0\0\0\0\0\0".to_vec(), "not a WAV file"),
        (Vec::new(), "not a WAV file"),
        (wav16(&tone, 16_000, 1)[..60].to_vec(), "truncated WAV file"),
    ];
    for (bytes, what) in cases {
        match audio::decode_wav(&bytes) {
            Err(Error::Audio(m)) => assert!(m.contains(what), "{what:?}: {m}"),
            other => panic!("{what:?}: {other:?}"),
        }
    }
}

/// Hostile bytes: WAV files (16 kHz mono, 44.1 kHz stereo and 8 kHz mono, resampled) with
/// bytes flipped, cut short, or a header that claims 2^31 samples are refused or read, never
/// a panic or an allocation of what a header claims.
#[test]
fn damaged_wav_files_are_refused_not_panicked_on() {
    let noise = pcm16(Kind::Noise, 4_000, 5);
    let good = wav16(&noise, 16_000, 1);
    let mut rng = XorShift(0x5eed);
    let (mut read, mut refused) = (0, 0);
    for (g, original) in [good.clone(), wav16(&noise, 44_100, 2), wav16(&noise, 8_000, 1)]
        .iter()
        .enumerate()
    {
        for i in 0..4_000 {
            let mut bytes = original.clone();
            for _ in 0..1 + i % 4 {
                // Mostly the header, where the damage matters.
                let at = (rng.next_u64() % if i % 2 == 0 { 64 } else { bytes.len() as u64 }) as usize;
                bytes[at] = rng.byte();
            }
            if i % 3 == 0 {
                bytes.truncate((rng.next_u64() % bytes.len() as u64) as usize);
            }
            match audio::decode_wav(&bytes) {
                Ok(samples) => {
                    // At most two samples a 16-bit frame (8 kHz up-sampled).
                    assert!(samples.len() <= bytes.len(), "{g} {i}: {} samples", samples.len());
                    read += 1;
                }
                Err(Error::Audio(_)) => refused += 1,
                Err(e) => panic!("{g} {i}: {e:?}"),
            }
        }
    }
    // The data chunk's size set to 2^32 - 2 bytes.
    let mut huge = good.clone();
    assert_eq!(&huge[36..40], b"data");
    huge[40..44].copy_from_slice(&0xFFFF_FFFEu32.to_le_bytes());
    assert!(matches!(audio::decode_wav(&huge), Err(Error::Audio(m)) if m.contains("truncated")));
    assert!(read > 0 && refused > 0, "{read} read, {refused} refused");
}

/// The MP3 and FLAC fixtures (`spec/fixtures/audio`, made with lame, flac and sox: its
/// README), each with its bytes.
fn compressed_fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/fixtures/audio");
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("mp3" | "flac")))
        .filter(|p| !p.to_str().unwrap().contains("silence-3h"))
        .map(|p| {
            (
                p.file_name().unwrap().to_str().unwrap().to_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// MP3 (mono and stereo; 8, 16, 22.05, 32, 44.1, 48 kHz; CBR and VBR; with an ID3v2 tag
/// and without, with a LAME/Xing tag and without) and FLAC (16- and 24-bit; 1, 2 and 6
/// channels; 8 to 96 kHz) decode to miniaudio's samples as mtmd-helper asks for them (f32,
/// mono, 16 kHz), bit for bit.
#[test]
fn mp3_and_flac_files_decode_to_mtmd_helpers_samples() {
    let files = compressed_fixtures();
    assert!(files.len() >= 12, "{} fixtures", files.len());
    let mut samples = 0;
    for (name, bytes) in &files {
        assert!(audio::is_audio(bytes), "{name}");
        samples += assert_decodes_as_miniaudio(bytes, name);
    }
    println!(
        "{} MP3 and FLAC files, {samples} samples, all identical to miniaudio's",
        files.len()
    );
}

/// Damaged MP3 and FLAC files (every fixture cut at many lengths, bytes flipped, both)
/// are read or refused as `Error::Audio`, never a panic, and what is read is no longer than
/// the two-hour limit.
#[test]
fn damaged_mp3_and_flac_files_are_refused_not_panicked_on() {
    let mut rng = XorShift(0xa0d1_0bad);
    let (mut read, mut refused) = (0, 0);
    for (name, original) in compressed_fixtures() {
        for i in 0..400 {
            let mut bytes = original.clone();
            if i % 4 != 3 {
                for _ in 0..1 + i % 5 {
                    // Half of the time the first 64 bytes: the headers and tags.
                    let at = (rng.next_u64() % if i % 2 == 0 { 64 } else { bytes.len() as u64 }) as usize;
                    bytes[at] = rng.byte();
                }
            }
            if i % 3 != 1 {
                bytes.truncate((rng.next_u64() % bytes.len() as u64) as usize);
            }
            match audio::decode_audio(&bytes) {
                Ok(samples) => {
                    assert!(samples.len() as u64 <= 2 * 3600 * 16_000, "{name} {i}");
                    read += 1;
                }
                Err(Error::Audio(_)) => refused += 1,
                Err(e) => panic!("{name} {i}: {e:?}"),
            }
        }
    }
    println!("damaged MP3 and FLAC files: {read} read, {refused} refused");
    assert!(read > 0 && refused > 0, "{read} read, {refused} refused");
}

/// A FLAC bomb: three hours of silence at 1 kHz in 2,433 bytes (frames of one constant
/// subframe, 65,535 samples each), up-sampled 172,800,000 samples, is refused at once by
/// its claimed length; claiming no length it is refused too (mtmd-helper reads nothing of
/// it); claiming 16 s it gives those 16 s (256,000 samples), not what its frames hold.
#[test]
fn a_flac_bomb_is_refused_before_it_is_decoded() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/fixtures/audio/silence-3h-1khz.flac");
    let bomb = std::fs::read(path).unwrap();
    // STREAMINFO's last 36 bits of bytes 18..26: the total samples.
    let claiming = |total: u64| {
        let mut bytes = bomb.clone();
        let word = u64::from_be_bytes(bytes[18..26].try_into().unwrap());
        let word = (word & !((1u64 << 36) - 1)) | total;
        bytes[18..26].copy_from_slice(&word.to_be_bytes());
        bytes
    };
    assert_eq!(claiming(10_800_000), bomb);
    let started = std::time::Instant::now();
    match audio::decode_audio(&bomb) {
        Err(Error::Audio(m)) => assert!(m.contains("two hours"), "{m}"),
        other => panic!("{other:?}"),
    }
    match audio::decode_audio(&claiming(0)) {
        Err(Error::Audio(m)) => assert!(m.contains("does not say its length"), "{m}"),
        other => panic!("{other:?}"),
    }
    match audio::decode_audio(&claiming((1 << 36) - 1)) {
        Err(Error::Audio(m)) => assert!(m.contains("two hours"), "{m}"),
        other => panic!("{other:?}"),
    }
    let refused = started.elapsed();
    assert!(refused.as_millis() < 100, "{refused:?}");
    let sixteen = audio::decode_audio(&claiming(16_000)).unwrap();
    assert_eq!(sixteen.len(), 256_000);
    assert!(sixteen.iter().all(|&x| x == 0.0));
    println!("the FLAC bomb refused in {refused:?}");
}

/// Audio elelem does not read (Ogg Vorbis, AAC in ADTS, which mtmd-helper takes for MP3 by
/// its sync, garbage after an ID3 tag, too few bytes) is refused by name, and neither an
/// image nor anything else is taken for audio.
#[test]
fn other_audio_formats_are_refused_naming_the_ones_read() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/fixtures/audio");
    let ogg = std::fs::read(dir.join("tone-16k-mono.ogg")).unwrap();
    let adts = [[0xFFu8, 0xF1, 0x50, 0x80, 0x02, 0x1F, 0xFC].as_slice(), &[0x21; 200]].concat();
    let id3_garbage = [b"ID3\x03\0\0\0\0\0\x0a".as_slice(), &[0x55; 300]].concat();
    for (bytes, what) in [
        (
            ogg.as_slice(),
            "an Ogg file: Vorbis, Opus): elelem reads WAV, MP3 and FLAC",
        ),
        (adts.as_slice(), "elelem reads WAV, MP3 and FLAC"),
        (id3_garbage.as_slice(), "elelem reads WAV, MP3 and FLAC"),
        (b"fLaC\0\0\0".as_slice(), "fewer than 12 bytes"),
        (
            b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".as_slice(),
            "elelem reads WAV, MP3 and FLAC",
        ),
    ] {
        match audio::decode_audio(bytes) {
            Err(Error::Audio(m)) => assert!(m.contains(what), "{what:?}: {m}"),
            other => panic!("{what:?}: {other:?}"),
        }
    }
    // JPEG's FF D8 is no MPEG sync; PNG, GIF, WebP are no audio.
    for image in [
        &b"\xFF\xD8\xFF\xE0\0\x10JFIF\0\x01\x01"[..],
        b"GIF89a\x01\0\x01\0\0\0",
        b"RIFF\0\0\0\0WEBPVP8 ",
    ] {
        assert!(!audio::is_audio(image), "{image:?}");
    }
}

#[test]
fn log_mel_pieces_are_mtmds() {
    let mut floats = 0usize;
    let mut pieces = 0usize;
    let mut cases = 0usize;
    for n_mel in [80, 128] {
        let mel = WhisperMel::new(n_mel).unwrap();
        for (i, &n) in LENGTHS.iter().enumerate() {
            // The longest ones once, as tones: they are slow at mtmd's FFT.
            let kinds: &[Kind] = if n > 100_000 {
                &[Kind::Tones]
            } else {
                &[Kind::Tones, Kind::Silence, Kind::Noise]
            };
            for &kind in kinds {
                let samples: Vec<f32> = pcm16(kind, n, (i * 7 + n_mel) as u64)
                    .iter()
                    .map(|&s| f32::from(s) / 32768.0)
                    .collect();
                let ours = mel.preprocess(&samples).unwrap();
                let theirs = mtmd::whisper_mel(n_mel, &samples).expect("mtmd preprocesses it");
                assert_eq!(
                    ours.len() * n_mel * FRAMES_PER_CHUNK,
                    theirs.len(),
                    "{kind:?} {n}: pieces"
                );
                let ours: Vec<f32> = ours.into_iter().flat_map(|m| m.data).collect();
                let same = ours
                    .iter()
                    .zip(&theirs)
                    .filter(|(a, b)| a.to_bits() == b.to_bits())
                    .count();
                let worst = ours
                    .iter()
                    .zip(&theirs)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert_eq!(
                    same,
                    ours.len(),
                    "{n_mel} bands, {kind:?} {n}: {} of {} floats differ (by {worst} at most)",
                    ours.len() - same,
                    ours.len()
                );
                if matches!(kind, Kind::Tones) {
                    // Not a vacuous comparison: the spectrogram varies.
                    let mut bits: Vec<u32> = theirs.iter().map(|x| x.to_bits()).collect();
                    bits.sort_unstable();
                    bits.dedup();
                    assert!(
                        bits.len() > n.min(16_000) / 4,
                        "{n_mel} bands, {n}: {} distinct values",
                        bits.len()
                    );
                }
                floats += same;
                pieces += theirs.len() / (n_mel * FRAMES_PER_CHUNK);
                cases += 1;
            }
        }
    }
    eprintln!("log-mel: {cases} cases, {pieces} pieces, {floats} floats, all identical to mtmd's");
}

#[test]
fn audio_too_short_for_mtmd_is_refused() {
    let mel = WhisperMel::new(80).unwrap();
    for n in [0, 1] {
        let e = mel.preprocess(&vec![0.25; n]).unwrap_err();
        assert!(matches!(&e, Error::Audio(m) if m.contains("too short")), "{n}: {e:?}");
    }
    for n_mel in [0, 257] {
        assert!(matches!(WhisperMel::new(n_mel), Err(Error::Audio(_))), "{n_mel}");
    }
}

/// Writes a synthetic audio projector to the test's scratch folder.
fn write(name: &str, shape: &audio_mmproj::Shape) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.gguf"));
    audio_mmproj::writer(shape).write(&path).unwrap();
    path
}

/// The reference side of the encoder's comparison (stage 2 of docs/AUDIO-PLAN.md): clip.cpp
/// loads the synthetic Qwen2-Audio projector, F16 and F32, and encodes a piece of speech-like
/// audio to the 750 tokens of 96 values mtmd lays out for 30 s, with flash attention and
/// without. (Ultravox's and Voxtral's are not run: the pinned clip.cpp aborts on every piece
/// of theirs, its graph giving 188 tokens where it expects 187.)
#[test]
fn clip_encodes_the_synthetic_qwen2a_projector() {
    let samples: Vec<f32> = pcm16(Kind::Tones, 16_000, 3)
        .iter()
        .map(|&s| f32::from(s) / 32768.0)
        .collect();
    for ty in [TensorType::F16, TensorType::F32] {
        let shape = audio_mmproj::Shape {
            matrix_type: ty,
            ..audio_mmproj::Shape::QWEN2A
        };
        let path = write(&format!("qwen2a-{ty}"), &shape);
        let n_mel = shape.n_mel as usize;
        let mel = WhisperMel::new(n_mel).unwrap().preprocess(&samples).unwrap();
        for flash_attn in [true, false] {
            let embd = mtmd::clip_encode_audio(&path, flash_attn, 2, (n_mel, &mel[0].data), 1 << 20)
                .unwrap_or_else(|| panic!("clip encodes {ty} (flash attention {flash_attn})"));
            assert_eq!(embd.len(), 750 * shape.n_text_embd as usize, "{ty} {flash_attn}");
            assert!(embd.iter().all(|x| x.is_finite()), "{ty} {flash_attn}");
        }
    }
}

/// The log-mel pieces of `n` samples of `kind` for `n_mel` bands.
fn mel_pieces(n_mel: usize, kind: Kind, n: usize, seed: u64) -> Vec<Mel> {
    let samples: Vec<f32> = pcm16(kind, n, seed).iter().map(|&s| f32::from(s) / 32768.0).collect();
    WhisperMel::new(n_mel).unwrap().preprocess(&samples).unwrap()
}

/// Stage 2b of docs/AUDIO-PLAN.md: elelem's Qwen2-Audio encoder (Whisper's stem, the shared
/// ViT, the pooling, the projector) gives clip.cpp's embeddings for the same log-mel pieces,
/// float for float: F16 and F32 weights, flash attention on and off, pieces of 0.1 s of
/// tones, 1 s of full-scale noise, 29.9 s of tones and 45 s of tones (two pieces), and
/// silence.
#[test]
fn qwen2a_embeddings_are_clip_cpps_bit_for_bit() {
    let inputs: [(&str, Kind, usize); 5] = [
        ("0.1 s of tones", Kind::Tones, 1_600),
        ("1 s of noise", Kind::Noise, 16_000),
        ("1 s of silence", Kind::Silence, 16_000),
        ("29.9 s of tones", Kind::Tones, 478_400),
        ("45 s of tones", Kind::Tones, 720_000),
    ];
    let n_mel = audio_mmproj::Shape::QWEN2A.n_mel as usize;
    let pieces: Vec<(String, Mel)> = inputs
        .iter()
        .enumerate()
        .flat_map(|(i, &(what, kind, n))| {
            let pieces = mel_pieces(n_mel, kind, n, 40 + i as u64);
            let count = pieces.len();
            pieces
                .into_iter()
                .enumerate()
                .map(move |(j, mel)| (format!("{what}, piece {} of {count}", j + 1), mel))
        })
        .collect();
    assert_eq!(pieces.len(), 6);
    let (mut cases, mut floats) = (0, 0);
    for ty in [TensorType::F16, TensorType::F32] {
        let shape = audio_mmproj::Shape {
            matrix_type: ty,
            ..audio_mmproj::Shape::QWEN2A
        };
        let path = write(&format!("qwen2a-encoder-{ty}"), &shape);
        let mmproj = Arc::new(Mmproj::open(&path).unwrap());
        assert_eq!(mmproj.n_mmproj_embd(), shape.n_text_embd as u32);
        assert_eq!(mmproj.n_output_tokens(), 750);
        for flash_attn in [true, false] {
            let params = EncoderParams {
                n_threads: 2,
                flash_attn,
            };
            let mut encoder = Encoder::new(Arc::clone(&mmproj), params).unwrap();
            for (what, mel) in &pieces {
                let ours = encoder.encode_audio(mel).unwrap();
                let theirs = mtmd::clip_encode_audio(&path, flash_attn, 2, (n_mel, &mel.data), 1 << 20)
                    .unwrap_or_else(|| panic!("clip encodes {what} ({ty}, flash attention {flash_attn})"));
                assert_eq!(ours.len(), 750 * shape.n_text_embd as usize, "{what}");
                assert_eq!(ours.len(), theirs.len(), "{what}");
                let same = ours
                    .iter()
                    .zip(&theirs)
                    .filter(|(a, b)| a.to_bits() == b.to_bits())
                    .count();
                let worst = ours
                    .iter()
                    .zip(&theirs)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert_eq!(
                    same,
                    ours.len(),
                    "{what} ({ty}, flash attention {flash_attn}): {} of {} floats differ (by {worst} at most)",
                    ours.len() - same,
                    ours.len()
                );
                // Not a vacuous comparison: the embeddings vary.
                let mut bits: Vec<u32> = theirs.iter().map(|x| x.to_bits()).collect();
                bits.sort_unstable();
                bits.dedup();
                assert!(bits.len() > ours.len() / 8, "{what}: {} distinct values", bits.len());
                floats += same;
                cases += 1;
            }
        }
    }
    eprintln!("qwen2a encoder: {cases} pieces encoded, {floats} floats, all identical to clip.cpp's");
}

/// An audio encoder takes pieces of its own bands and 3000 frames, and no images; a vision
/// encoder takes no audio.
#[test]
fn audio_encoders_take_their_pieces_only() {
    let path = write("qwen2a-pieces", &audio_mmproj::Shape::QWEN2A);
    let mmproj = Arc::new(Mmproj::open(&path).unwrap());
    let mut encoder = Encoder::new(mmproj, EncoderParams::default()).unwrap();
    let wrong = [
        Mel {
            n_mel: 128,
            n_len: FRAMES_PER_CHUNK,
            data: vec![0.0; 128 * FRAMES_PER_CHUNK],
        },
        Mel {
            n_mel: 80,
            n_len: 1_500,
            data: vec![0.0; 80 * 1_500],
        },
        Mel {
            n_mel: 80,
            n_len: FRAMES_PER_CHUNK,
            data: vec![0.0; 80],
        },
    ];
    for mel in &wrong {
        let e = encoder.encode_audio(mel).unwrap_err();
        assert!(
            matches!(&e, Error::Audio(m) if m.contains("80 mel bands x 3000 frames")),
            "{e:?}"
        );
    }
    let image = elelem_engine::vision::ImageF32::new(28, 28, vec![0.0; 28 * 28 * 3]).unwrap();
    assert!(matches!(encoder.encode(&image), Err(Error::Image(m)) if m.contains("takes audio")));
}

/// A synthetic Qwen2-Audio projector altered by `alter`, as `Mmproj::load` takes it.
fn load_qwen2a(alter: impl FnOnce(&mut GgufWriter)) -> Result<Mmproj, Error> {
    let mut w = audio_mmproj::writer(&audio_mmproj::Shape {
        n_layer: 1,
        ..audio_mmproj::Shape::QWEN2A
    });
    alter(&mut w);
    Mmproj::load(elelem_gguf::Gguf::from_bytes(w.to_bytes()).unwrap())
}

/// A file's alteration: what it is, the change, and what its refusal names.
type Alteration = (&'static str, Box<dyn FnOnce(&mut GgufWriter)>, &'static str);

/// A Qwen2-Audio projector that clip.cpp's graph would abort on, or that does not fit
/// itself, is refused with what is wrong: never an abort.
#[test]
fn qwen2a_projectors_that_do_not_fit_are_refused() {
    assert!(load_qwen2a(|_| {}).is_ok());
    let cases: Vec<Alteration> = vec![
        (
            "a missing tensor",
            Box::new(|w| {
                w.remove_tensor("a.blk.0.attn_q.weight");
            }),
            "missing tensor a.blk.0.attn_q.weight",
        ),
        (
            "a wrong width",
            Box::new(|w| {
                w.remove_tensor("a.blk.0.ffn_up.weight");
                w.add_f32("a.blk.0.ffn_up.weight", &[64, 100], &vec![0.0; 6_400]);
            }),
            "a.blk.0.ffn_up.weight",
        ),
        (
            "a stem for other mel bands",
            Box::new(|w| {
                w.set("clip.audio.num_mel_bins", Value::U32(128));
            }),
            "a.conv1d.1.weight",
        ),
        (
            "a kernel of 5",
            Box::new(|w| {
                w.remove_tensor("a.conv1d.2.weight");
                w.add_f32("a.conv1d.2.weight", &[5, 64, 64], &vec![0.0; 5 * 64 * 64]);
            }),
            "a.conv1d.2.weight",
        ),
        (
            "fewer positions than a piece's",
            Box::new(|w| {
                w.remove_tensor("a.position_embd.weight");
                w.add_f32("a.position_embd.weight", &[64, 1_499], &vec![0.0; 64 * 1_499]);
            }),
            "at least 1500 positions",
        ),
        (
            "F16 positions",
            Box::new(|w| {
                w.remove_tensor("a.position_embd.weight");
                w.add_tensor(
                    "a.position_embd.weight",
                    &[64, 1_500],
                    TensorType::F16,
                    vec![0; 2 * 64 * 1_500],
                );
            }),
            "a.position_embd.weight",
        ),
        (
            "no Q bias",
            Box::new(|w| {
                w.remove_tensor("a.blk.0.attn_q.bias");
            }),
            "a.blk.0.attn_q.bias",
        ),
        (
            "no LayerNorm bias",
            Box::new(|w| {
                w.remove_tensor("a.blk.0.ln2.bias");
            }),
            "a.blk.0.ln2.bias",
        ),
        (
            "no projection",
            Box::new(|w| {
                w.remove_tensor("mm.a.fc.weight");
            }),
            "mm.a.fc.weight",
        ),
        (
            "no mel bands",
            Box::new(|w| {
                w.remove("clip.audio.num_mel_bins");
            }),
            "clip.audio.num_mel_bins",
        ),
        (
            "0 mel bands",
            Box::new(|w| {
                w.set("clip.audio.num_mel_bins", Value::U32(0));
            }),
            "num_mel_bins 0",
        ),
        (
            "heads that do not divide the width",
            Box::new(|w| {
                w.set("clip.audio.attention.head_count", Value::U32(5));
            }),
            "not a multiple of head_count 5",
        ),
    ];
    for (what, alter, expected) in cases {
        match load_qwen2a(alter) {
            Err(Error::Load(m)) => assert!(m.contains(expected), "{what}: {m}"),
            Err(e) => panic!("{what}: {e:?}"),
            Ok(_) => panic!("{what}: loaded"),
        }
    }
    // What clip.cpp reads and Whisper's graph asserts against, or would not use.
    let unsupported: Vec<Alteration> = vec![
        (
            "a K bias",
            Box::new(|w| {
                w.add_f32("a.blk.0.attn_k.bias", &[64], &[0.0; 64]);
            }),
            "a.blk.0.attn_k.bias",
        ),
        (
            "a pre-LayerNorm",
            Box::new(|w| {
                w.add_f32("a.pre_ln.weight", &[64], &[1.0; 64]);
            }),
            "a.pre_ln.weight",
        ),
        (
            "declared a vision encoder",
            Box::new(|w| {
                w.set("clip.has_vision_encoder", Value::Bool(true));
            }),
            "audio encoder",
        ),
    ];
    for (what, alter, expected) in unsupported {
        match load_qwen2a(alter) {
            Err(Error::Unsupported(m)) => assert!(m.contains(expected), "{what}: {m}"),
            Err(e) => panic!("{what}: {e:?}"),
            Ok(_) => panic!("{what}: loaded"),
        }
    }
}

#[test]
fn elelem_refuses_ultravox_and_voxtral_by_name() {
    for (name, shape) in [
        ("ultravox", audio_mmproj::Shape::ULTRAVOX),
        ("voxtral", audio_mmproj::Shape::VOXTRAL),
    ] {
        match Mmproj::open(write(&format!("refused-{name}"), &shape)) {
            Err(Error::Unsupported(m)) => {
                assert!(m.contains(&format!("audio projector (\"{name}\")")), "{name}: {m}");
                assert!(m.contains("aborts"), "{name}: {m}");
            }
            Err(e) => panic!("{name}: {e:?}"),
            Ok(_) => panic!("{name}: opened"),
        }
    }
}

/// Hostile projectors: every tensor of a Qwen2-Audio file in turn replaced by three I32
/// values is refused naming it; files with bytes of their keys and tensor descriptors
/// changed are refused or encode a piece, never a panic or an abort.
#[test]
fn mutated_qwen2a_files_are_errors_or_encode() {
    let shape = audio_mmproj::Shape {
        n_layer: 1,
        ..audio_mmproj::Shape::QWEN2A
    };
    let bytes = audio_mmproj::writer(&shape).to_bytes();
    let gguf = elelem_gguf::Gguf::from_bytes(&bytes).unwrap();
    let header = gguf.data_offset() as usize;
    for name in gguf.tensors().iter().map(|t| t.name.clone()) {
        let e = load_qwen2a(|w| {
            w.remove_tensor(&name);
            w.add_tensor(&name, &[3], TensorType::from_id(26).unwrap(), vec![0; 12]);
        })
        .err()
        .unwrap_or_else(|| panic!("{name}: loaded"));
        assert!(
            matches!(&e, Error::Load(m) if m.contains(name.as_str())),
            "{name}: {e:?}"
        );
    }
    let mut rng = XorShift(0xa0d1);
    let (mut encoded, mut refused) = (0, 0);
    for _ in 0..1000 {
        let mut mutated = bytes.clone();
        for _ in 0..1 + rng.next_u64() % 4 {
            let at = (rng.next_u64() % header as u64) as usize;
            mutated[at] = rng.byte();
        }
        let outcome = elelem_gguf::Gguf::from_bytes(&mutated)
            .map_err(Error::from)
            .and_then(|gguf| {
                let mmproj = Arc::new(Mmproj::load(gguf)?);
                let n_mel = mmproj.hparams.n_mel_bins as usize;
                let params = EncoderParams {
                    n_threads: 2,
                    flash_attn: true,
                };
                let piece = Mel {
                    n_mel,
                    n_len: FRAMES_PER_CHUNK,
                    data: vec![0.25; n_mel * FRAMES_PER_CHUNK],
                };
                Encoder::new(mmproj, params)?.encode_audio(&piece)
            });
        match outcome {
            Ok(_) => encoded += 1,
            Err(Error::Load(_) | Error::Unsupported(_) | Error::Audio(_)) => refused += 1,
            Err(e) => panic!("a mutated projector failed otherwise than refused: {e:?}"),
        }
    }
    assert!(encoded > 0 && refused > 0, "{encoded} encoded, {refused} refused");
    eprintln!("qwen2a: 1000 mutated files, {encoded} encoded, {refused} refused");
}

/// The embeddings of a piece are the same bits whatever the encoder's thread count (as
/// clip.cpp's are compared at 2 above), flash attention on and off.
#[test]
fn qwen2a_embeddings_do_not_depend_on_the_thread_count() {
    let path = write("qwen2a-threads", &audio_mmproj::Shape::QWEN2A);
    let mmproj = Arc::new(Mmproj::open(&path).unwrap());
    let mel = &mel_pieces(80, Kind::Tones, 16_000, 7)[0];
    for flash_attn in [true, false] {
        let encode = |n_threads| {
            let params = EncoderParams { n_threads, flash_attn };
            Encoder::new(Arc::clone(&mmproj), params)
                .unwrap()
                .encode_audio(mel)
                .unwrap()
        };
        let two: Vec<u32> = encode(2).iter().map(|x| x.to_bits()).collect();
        for n_threads in [1, 3, 4] {
            let other: Vec<u32> = encode(n_threads).iter().map(|x| x.to_bits()).collect();
            assert!(two == other, "{n_threads} threads (flash attention {flash_attn})");
        }
    }
}
