//! Every MP3 and FLAC file of a folder decoded by elelem and by mtmd-helper's miniaudio path,
//! sample for sample (`elelem_testkit::mtmd::compare_decoding`): a sweep over files made with
//! lame, flac and sox, larger than the committed fixtures `tests/audio.rs` checks (see
//! docs/AUDIO-PLAN.md).
//!
//! cargo run --release -p elelem-testkit --example audio_sweep -- DIR

use elelem_testkit::mtmd;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: audio_sweep DIR")?;
    let mut paths: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.retain(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("mp3" | "flac")));
    paths.sort();
    let (mut samples, mut failed) = (0, 0);
    for path in &paths {
        match mtmd::compare_decoding(&std::fs::read(path)?) {
            Ok(n) => samples += n,
            Err(e) => {
                eprintln!("{}: {e}", path.display());
                failed += 1;
            }
        }
    }
    println!(
        "{} files, {samples} samples identical to miniaudio's; {failed} files differ or fail",
        paths.len()
    );
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}
