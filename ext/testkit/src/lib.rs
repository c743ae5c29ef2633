//! What elelem's tests are made of, in a crate of its own so that none of it is
//! linked into the gem:
//!
//! - [`canary`]: seeded random-weight models written by our GGUF writer, one per
//!   architecture and per weight type, whose goldens come from llama.cpp.
//! - [`hostile`]: the corpus of malformed and adversarial GGUF files, and what each
//!   must do (open and run, or be refused with a load error).

pub mod canary;
pub mod hostile;
