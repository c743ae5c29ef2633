//! Streaming text out of generated tokens: one character can span several
//! tokens' bytes, so bytes are held back until the character is complete.

/// Feeds bytes, yields only complete UTF-8 characters. A sequence that can
/// never become valid UTF-8 comes out as U+FFFD, as with
/// [`String::from_utf8_lossy`].
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Utf8Stream {
        Utf8Stream::default()
    }

    /// Appends `bytes` and returns the text that is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest = self.pending.as_slice();
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    out.push_str(valid);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).expect("checked by from_utf8"));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        // An incomplete character at the end: wait for more.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        self.pending.drain(..self.pending.len() - keep);
        out
    }

    /// Ends the stream: an incomplete character left over becomes U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Stream;

    #[test]
    fn holds_back_partial_characters() {
        let mut s = Utf8Stream::new();
        let bytes = "a😀é".as_bytes();
        assert_eq!(s.push(&bytes[..2]), "a");
        assert_eq!(s.push(&bytes[2..4]), "");
        assert_eq!(s.push(&bytes[4..6]), "😀");
        assert_eq!(s.push(&bytes[6..]), "é");
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn replaces_what_can_never_be_valid() {
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(b"x\xFFy\xE2\x82"), "x\u{FFFD}y");
        assert_eq!(s.push(b"z"), "\u{FFFD}z");
        assert_eq!(s.push(b"\xF0\x9F"), "");
        assert_eq!(s.finish(), "\u{FFFD}");
    }
}
