//! Text out of a generation: each token's piece (as llama.cpp prints it),
//! streamed as whole UTF-8 characters, with stop strings that are never
//! emitted, not even in part.

use elelem_tokenizer::Utf8Stream;

use crate::generate::{GenerateParams, Generator, StopReason};
use crate::sampler::{Sampler, SamplerParams};
use crate::{Context, Error, Result};

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

pub struct TextGenerator<'c> {
    generator: Generator<'c>,
    sampler: Sampler,
    utf8: Utf8Stream,
    stops: Vec<String>,
    /// Decoded text not yet emitted: it could still be the start of a stop string.
    held: String,
    text: String,
    stopped_by_string: bool,
}

impl<'c> TextGenerator<'c> {
    pub fn start(ctx: &'c mut Context, prompt: &[u32], params: TextParams) -> Result<TextGenerator<'c>> {
        params.sampler.validate().map_err(Error::InvalidArgument)?;
        if params.stop.iter().any(String::is_empty) {
            return Err(Error::InvalidArgument("stop strings must not be empty".into()));
        }
        // Without a usable tokenizer ids still generate, with no text; stop strings need text.
        if !params.stop.is_empty() {
            ctx.model().tokenizer()?;
        }
        let mut sampler = Sampler::new(params.sampler);
        prompt.iter().for_each(|&t| sampler.accept(t));
        let generator = Generator::start(ctx, prompt, params.generate)?;
        Ok(TextGenerator {
            generator,
            sampler,
            utf8: Utf8Stream::new(),
            stops: params.stop,
            held: String::new(),
            text: String::new(),
            stopped_by_string: false,
        })
    }

    /// The next piece of text to show (possibly empty), or `None` when finished.
    pub fn step(&mut self) -> Result<Option<String>> {
        if self.stopped_by_string {
            return Ok(None);
        }
        let sampler = &mut self.sampler;
        let Some(token) = self.generator.step(|logits| sampler.sample(logits))? else {
            let rest = std::mem::take(&mut self.held) + &self.utf8.finish();
            return Ok((!rest.is_empty()).then(|| self.emit(rest)));
        };
        self.sampler.accept(token);
        let model = self.generator.model();
        if let Ok(tokenizer) = model.tokenizer() {
            if !(model.is_eog(token) && self.generator.stop_reason() == Some(StopReason::Eos)) {
                self.held
                    .push_str(&self.utf8.push(tokenizer.token_to_piece(token, false)));
            }
        }
        Ok(Some(self.release()))
    }

    /// Emits what can no longer be part of a stop string; ends at a stop string.
    fn release(&mut self) -> String {
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.held.truncate(at);
            self.stopped_by_string = true;
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

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn tokens(&self) -> &[u32] {
        self.generator.tokens()
    }

    pub fn finish_reason(&self) -> Option<FinishReason> {
        if self.stopped_by_string {
            Some(FinishReason::Stop)
        } else {
            self.generator.stop_reason().map(FinishReason::Generation)
        }
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
