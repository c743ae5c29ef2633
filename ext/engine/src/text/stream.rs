//! Text out of a generation: each token's piece (as llama.cpp prints it),
//! streamed as whole UTF-8 characters, with stop strings that are never
//! emitted, not even in part.

use elelem_tokenizer::Utf8Stream;

use crate::text::sampler::SamplerParams;
use crate::{Error, Result};

/// The most tokens a generation makes unless told otherwise (`Elelem::Defaults::MAX_TOKENS`).
pub const DEFAULT_MAX_TOKENS: u32 = 32;

#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_tokens: u32,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Keep the K and V of the prompt's prefix shared with the sequence's previous
    /// request (a chat's earlier turns) instead of evaluating it again. The
    /// continuation is then llama.cpp's with its prompt cache, not a fresh
    /// evaluation's: the remaining tokens are evaluated in smaller batches, which
    /// rounds differently.
    pub reuse_prefix: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            max_tokens: DEFAULT_MAX_TOKENS,
            ignore_eos: false,
            reuse_prefix: false,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token (included in the output).
    Eos,
    /// `max_tokens` were produced.
    Length,
    /// The context window is full.
    ContextFull,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Eos => "eos",
            StopReason::Length => "length",
            StopReason::ContextFull => "context_full",
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct TextParams {
    pub generate: GenerateParams,
    pub sampler: SamplerParams,
    pub stop: Vec<String>,
}

/// Why a text generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    Generation(StopReason),
    /// A stop string appeared.
    Stop,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Generation(r) => r.as_str(),
            FinishReason::Stop => "stop",
        }
    }
}

/// A sequence's text as it is generated: each token's piece (as llama.cpp prints
/// it) streamed as whole UTF-8 characters, held back while it could still be the
/// start of a stop string, and cut where one appears.
pub struct TextStream {
    utf8: Utf8Stream,
    stops: Vec<String>,
    /// Decoded text not yet emitted: it could still be the start of a stop string.
    held: String,
    text: String,
    stopped: bool,
}

impl TextStream {
    /// Checks the stop strings (none empty).
    pub fn new(stops: Vec<String>) -> Result<TextStream> {
        if stops.iter().any(String::is_empty) {
            return Err(Error::InvalidArgument("stop strings must not be empty".into()));
        }
        Ok(TextStream {
            utf8: Utf8Stream::new(),
            stops,
            held: String::new(),
            text: String::new(),
            stopped: false,
        })
    }

    pub fn has_stops(&self) -> bool {
        !self.stops.is_empty()
    }

    /// Adds a token's bytes; returns the text that can be shown now (possibly empty).
    pub fn push(&mut self, piece: &[u8]) -> String {
        if self.stopped {
            return String::new();
        }
        self.held.push_str(&self.utf8.push(piece));
        self.release()
    }

    /// The text still held back, at the end of the generation.
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let rest = std::mem::take(&mut self.held) + &self.utf8.finish();
        self.emit(rest)
    }

    /// Whether a stop string ended the text.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Emits what can no longer be part of a stop string; ends at a stop string.
    fn release(&mut self) -> String {
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.held.truncate(at);
            self.stopped = true;
            let out = std::mem::take(&mut self.held);
            return self.emit(out);
        }
        let keep = self
            .stops
            .iter()
            .map(|s| longest_suffix_prefix(&self.held, s))
            .max()
            .unwrap_or(0);
        let out = self.held.split_off(self.held.len() - keep);
        let out = std::mem::replace(&mut self.held, out);
        self.emit(out)
    }

    fn emit(&mut self, piece: String) -> String {
        self.text.push_str(&piece);
        piece
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `stop`,
/// on a character boundary.
fn longest_suffix_prefix(text: &str, stop: &str) -> usize {
    (1..stop.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && stop.as_bytes().starts_with(&text.as_bytes()[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::longest_suffix_prefix;

    #[test]
    fn holds_back_only_what_could_start_a_stop_string() {
        assert_eq!(longest_suffix_prefix("hello wor", "world"), 3);
        assert_eq!(longest_suffix_prefix("hello", "world"), 0);
        assert_eq!(longest_suffix_prefix("ab", "abc"), 2);
        assert_eq!(longest_suffix_prefix("é", "\u{e9}x"), 2);
        assert_eq!(longest_suffix_prefix("", "x"), 0);
    }
}
