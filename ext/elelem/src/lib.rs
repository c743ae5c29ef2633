//! The `elelem` Ruby extension: magnus classes mirroring the Ruby ones
//! (`ruby_api/<class>.rs`), the GVL release around native work, and the
//! mapping of engine errors to Ruby exceptions. No arithmetic lives here.

mod ruby_api;

use magnus::{Error, Ruby};

#[magnus::init]
fn init(ruby: &Ruby) -> Result<(), Error> {
    ruby_api::init(ruby)
}
