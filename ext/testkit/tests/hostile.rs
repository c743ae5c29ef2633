//! Every hostile file of the corpus (see `elelem_testkit::hostile`) either opens
//! and runs or is refused with a load error naming the problem; none panics,
//! aborts or hangs. Deterministic: the same files every run.

use std::time::Instant;

use elelem_engine::Error;
use elelem_testkit::hostile::{self, Expect};

/// Random mutants per seed, on top of the systematic ones.
const N_RANDOM: usize = 2000;

#[test]
fn every_hostile_file_runs_or_is_refused_naming_the_problem() {
    let start = Instant::now();
    let corpus = hostile::corpus(N_RANDOM);
    let (mut ran, mut refused) = (0, 0);
    for case in &corpus {
        let outcome = hostile::exercise(&case.bytes);
        match (&outcome, case.expect) {
            (Ok(_), Expect::Runs | Expect::Either) => ran += 1,
            (Err(Error::Load(msg) | Error::Unsupported(msg)), Expect::Rejected(words)) if msg.contains(words) => {
                refused += 1
            }
            (Err(Error::Load(msg) | Error::Unsupported(msg)), Expect::Either) if !msg.is_empty() => refused += 1,
            _ => panic!("{}: expected {:?}, got {outcome:?}", case.name, case.expect),
        }
    }
    eprintln!(
        "{} hostile files: {ran} opened and ran, {refused} refused with a load error ({:.1} s)",
        corpus.len(),
        start.elapsed().as_secs_f64()
    );
}

#[test]
fn structured_cases_cover_each_check_once() {
    let cases = hostile::structured();
    let mut names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names are unique (they name the files)");
}
