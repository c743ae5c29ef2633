//! Any bytes as a GGUF: they open and run, or are refused with a load error.
//! Anything else (a panic, a ggml abort, a crash, another error) is a finding.
#![no_main]

use elelem_engine::Error;
use elelem_testkit::hostile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match hostile::exercise(data) {
        Ok(_) | Err(Error::Load(_)) => {}
        Err(e) => panic!("a file gave an error other than a load error: {e:?}"),
    }
});
