//! Constrained decoding: the tokens a JSON Schema, a grammar, a regex or a
//! list of choices allows next, as a mask over the logits.
//!
//! The work is llguidance's (the library behind llama.cpp's `LLAMA_LLGUIDANCE`
//! build): an Earley parser over a lexer of derivative-based regexes, walked
//! together with a trie of the vocabulary's byte strings. Its token environment
//! is built as llama.cpp's `common/llguidance.cpp` builds it: each token's
//! bytes as it prints without special tokens, a special token as `0xff` and its
//! text (so grammars name it `<|im_end|>`), and the tokenizer itself for the
//! strings a grammar forces. The trie over a vocabulary of 151,936 tokens takes
//! a noticeable time to build, so it is built once per tokenizer and shared
//! ([`ConstraintFactory::for_tokenizer`]).
//!
//! A [`Constraint`] belongs to one sequence: [`Constraint::mask`] before
//! sampling, [`Constraint::commit`] after, [`Constraint::is_finished`] to stop.
//! A lazy one ([`Constraint::lazy`]) lets the model write freely until its text
//! opens a [`Trigger`] (`<tool_call>`, or a reply starting `{"name":`), then
//! constrains what follows, as llama.cpp's lazy grammars do, and goes back to
//! waiting once that part is complete.

use std::sync::{Arc, Mutex, Weak};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};

use crate::{Error, Result, Tokenizer};

/// What a constraint allows the model to write.
#[derive(Debug, Clone, PartialEq)]
pub enum ConstraintSpec {
    /// One JSON value valid against the schema (llguidance's JSON Schema subset:
    /// a keyword it cannot enforce is refused, not ignored).
    JsonSchema(serde_json::Value),
    /// A grammar in llama.cpp's GBNF, `root` being the start rule.
    Gbnf(String),
    /// A grammar in llguidance's Lark dialect (`start` being the start rule).
    Lark(String),
    /// Text matching the whole regex (Rust `regex` syntax).
    Regex(String),
    /// Exactly one of the strings.
    Choice(Vec<String>),
}

/// Between JSON tokens llguidance allows any run of whitespace by default, so
/// at temperature 1.0 a model can spend all its tokens on newlines. llama.cpp's
/// `json_schema_to_grammar` allows a space or up to two newlines and twenty
/// spaces or tabs; a schema's own `x-guidance` options override this.
const JSON_WHITESPACE: &str = r"(?: |\n{1,2}[ \t]{0,20})";

impl ConstraintSpec {
    /// The spec as llguidance's grammar, or what it cannot express.
    fn to_grammar(&self) -> Result<TopLevelGrammar> {
        Ok(match self {
            ConstraintSpec::JsonSchema(schema) => {
                let mut schema = schema.clone();
                if let Some(object) = schema.as_object_mut() {
                    object
                        .entry("x-guidance")
                        .or_insert_with(|| serde_json::json!({ "whitespace_pattern": JSON_WHITESPACE }));
                }
                TopLevelGrammar::from_json_schema(schema)
            }
            ConstraintSpec::Gbnf(gbnf) => TopLevelGrammar::from_lark(crate::text::gbnf::to_lark(gbnf)?),
            ConstraintSpec::Lark(lark) => TopLevelGrammar::from_lark(lark.clone()),
            ConstraintSpec::Regex(regex) => TopLevelGrammar::from_regex(regex),
            ConstraintSpec::Choice(choices) => {
                if choices.is_empty() {
                    return Err(Error::InvalidArgument("choice: needs at least one string".into()));
                }
                let alternatives: Vec<String> = choices
                    .iter()
                    .map(|c| serde_json::to_string(c).expect("a string always serializes"))
                    .collect();
                TopLevelGrammar::from_lark(format!("start: {}", alternatives.join(" | ")))
            }
        })
    }

    /// llguidance's refusal of the spec, in the spec's own terms: a GBNF
    /// grammar's rules by their names, not the Lark names they were given.
    fn refusal(&self, message: &str) -> Error {
        let message = match self {
            ConstraintSpec::Gbnf(_) => crate::text::gbnf::with_gbnf_names(message),
            _ => message.to_string(),
        };
        Error::InvalidArgument(format!("unsupported {}: {message}", self.kind()))
    }

    fn kind(&self) -> &'static str {
        match self {
            ConstraintSpec::JsonSchema(_) => "JSON schema",
            ConstraintSpec::Gbnf(_) => "GBNF grammar",
            ConstraintSpec::Lark(_) => "Lark grammar",
            ConstraintSpec::Regex(_) => "regex",
            ConstraintSpec::Choice(_) => "choice",
        }
    }
}

/// llguidance's view of an elelem tokenizer: the trie of token bytes, and the
/// tokenizer for strings a grammar forces (special tokens parsed, as llama.cpp's
/// `llama_sampler_llg_tokenize_fn`).
struct TokenizerBridge {
    trie: TokTrie,
    tokenizer: Arc<Tokenizer>,
}

impl TokenizerEnv for TokenizerBridge {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, bytes: &[u8]) -> Vec<u32> {
        self.trie
            .tokenize_with_greedy_fallback(bytes, |text| self.tokenizer.tokenize(text, false, true))
    }

    // Not canonical: a model may spell what a grammar forces with any tokens (`n` `a` `m`
    // `e` as well as `name`), as llama.cpp's GBNF sampler lets it. Declared canonical,
    // llguidance allowed only the tokenizer's own spelling, and greedy ids under a grammar
    // parted from llama.cpp's wherever a model preferred another (random-weight models
    // did; a forced `{` after SentencePiece's leading space was even refused).
    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// The compiled vocabulary a tokenizer's constraints share.
pub struct ConstraintFactory {
    factory: ParserFactory,
}

/// Factories by tokenizer: a model's tokenizer lives as long as the model, and a
/// dead entry is dropped on the next lookup.
static FACTORIES: Mutex<Vec<(Weak<Tokenizer>, Arc<ConstraintFactory>)>> = Mutex::new(Vec::new());

impl ConstraintFactory {
    /// The factory for `tokenizer`, built on first use and then shared.
    pub fn for_tokenizer(tokenizer: &Arc<Tokenizer>) -> Result<Arc<ConstraintFactory>> {
        let mut factories = FACTORIES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        factories.retain(|(owner, _)| owner.strong_count() > 0);
        if let Some((_, factory)) = factories
            .iter()
            .find(|(owner, _)| std::ptr::eq(owner.as_ptr(), Arc::as_ptr(tokenizer)))
        {
            return Ok(factory.clone());
        }
        let factory = Arc::new(ConstraintFactory::new(tokenizer)?);
        factories.push((Arc::downgrade(tokenizer), factory.clone()));
        Ok(factory)
    }

    /// Builds the trie and llguidance's slices of it.
    fn new(tokenizer: &Arc<Tokenizer>) -> Result<ConstraintFactory> {
        let n_vocab = tokenizer.n_vocab();
        let words: Vec<Vec<u8>> = (0..n_vocab as u32)
            .map(|id| match tokenizer.token_to_piece(id, false) {
                [] => match tokenizer.token_to_piece(id, true) {
                    [] => Vec::new(),
                    special => [&[TokTrie::SPECIAL_TOKEN_MARKER][..], special].concat(),
                },
                piece => piece.to_vec(),
            })
            .collect();
        // llama.cpp gives llguidance EOT, else EOS; every end-of-generation
        // token ends a constrained text as well.
        let end_tokens: Vec<u32> = (0..n_vocab as u32).filter(|&id| tokenizer.is_eog(id)).collect();
        let eos = tokenizer
            .eos()
            .filter(|&id| tokenizer.is_eog(id))
            .or_else(|| end_tokens.first().copied())
            .ok_or_else(|| Error::InvalidArgument("constraints need a vocabulary with an end-of-text token".into()))?;
        let mut trie = TokTrie::from(&TokRxInfo::new(n_vocab as u32, eos), &words);
        if end_tokens.len() > 1 {
            let mut eos_tokens = vec![eos];
            eos_tokens.extend(end_tokens.iter().filter(|&&id| id != eos));
            trie = trie.with_eos_tokens(&eos_tokens);
        }
        let env: TokEnv = Arc::new(TokenizerBridge {
            trie,
            tokenizer: tokenizer.clone(),
        });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| Error::Internal(format!("llguidance: {e}")))?;
        // Grammar warnings are not errors: keep them off the process's stderr.
        factory.quiet();
        Ok(ConstraintFactory { factory })
    }

    fn matcher(&self, spec: &ConstraintSpec) -> Result<Matcher> {
        let grammar = spec.to_grammar()?;
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| spec.refusal(&e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        match matcher.get_error() {
            Some(e) => Err(spec.refusal(&e)),
            None => Ok(matcher),
        }
    }

    fn vocab_size(&self) -> usize {
        self.factory.tok_env().tok_trie().vocab_size()
    }

    fn piece(&self, token: u32) -> &[u8] {
        let bytes = self.factory.tok_env().tok_trie().token(token);
        bytes.strip_prefix(&[TokTrie::SPECIAL_TOKEN_MARKER]).unwrap_or(bytes)
    }
}

/// What switches a lazy constraint on, and what it then enforces.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    /// Text the model writes (a special token's text included, e.g. `<tool_call>`).
    pub text: String,
    /// What the text right after the trigger must match.
    pub spec: ConstraintSpec,
    /// Only at the start of the unconstrained text (after whitespace and a
    /// Markdown code fence): a reply that *is* a call, not one that mentions
    /// `{"name":` in passing.
    pub at_start: bool,
}

struct CompiledTrigger {
    text: Vec<u8>,
    at_start: bool,
    /// The grammar at its start, cloned on each activation.
    fresh: Matcher,
}

/// Where a constraint stands.
enum State {
    /// A lazy constraint, unconstrained for now. `tail` is the end of the
    /// generated text in which a trigger may be starting; `opening` the whole
    /// text while an `at_start` trigger may still begin it.
    Waiting { tail: Vec<u8>, opening: Option<Vec<u8>> },
    /// Constraining until the matcher stops.
    Active(Box<Matcher>),
}

impl State {
    fn waiting() -> State {
        State::Waiting {
            tail: Vec::new(),
            opening: Some(Vec::new()),
        }
    }
}

/// One sequence's constraint. Build it before decoding: a spec llguidance
/// cannot handle is refused here.
pub struct Constraint {
    factory: Arc<ConstraintFactory>,
    state: State,
    /// Empty for an eager constraint.
    triggers: Vec<CompiledTrigger>,
}

impl Constraint {
    /// A constraint on the whole generated text.
    pub fn new(tokenizer: &Arc<Tokenizer>, spec: &ConstraintSpec) -> Result<Constraint> {
        let factory = ConstraintFactory::for_tokenizer(tokenizer)?;
        let matcher = factory.matcher(spec)?;
        Ok(Constraint {
            factory,
            state: State::Active(Box::new(matcher)),
            triggers: Vec::new(),
        })
    }

    /// A constraint that lets the model write freely until its text contains
    /// one of the triggers, then holds the text after it to that trigger's
    /// spec; once that part is complete it waits for the next trigger.
    pub fn lazy(tokenizer: &Arc<Tokenizer>, triggers: &[Trigger]) -> Result<Constraint> {
        if triggers.is_empty() || triggers.iter().any(|t| t.text.is_empty()) {
            return Err(Error::InvalidArgument(
                "a lazy constraint needs non-empty triggers".into(),
            ));
        }
        let factory = ConstraintFactory::for_tokenizer(tokenizer)?;
        let triggers = triggers
            .iter()
            .map(|t| {
                Ok(CompiledTrigger {
                    text: t.text.as_bytes().to_vec(),
                    at_start: t.at_start,
                    fresh: factory.matcher(&t.spec)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Constraint {
            factory,
            state: State::waiting(),
            triggers,
        })
    }

    /// Whether the constraint is enforcing now (always, for an eager one).
    pub fn is_active(&self) -> bool {
        matches!(self.state, State::Active(_))
    }

    /// The tokens allowed next, one bit per token id (`None` while a lazy
    /// constraint waits: every token is allowed).
    pub fn allowed_tokens(&mut self) -> Result<Option<SimpleVob>> {
        match &mut self.state {
            State::Waiting { .. } => Ok(None),
            State::Active(matcher) => {
                let mask = matcher
                    .compute_mask_or_eos()
                    .map_err(|e| Error::Internal(format!("constraint mask: {e}")))?;
                if mask.is_zero() {
                    return Err(Error::Internal("the constraint allows no token".into()));
                }
                Ok(Some(mask))
            }
        }
    }

    /// Sets the logits of disallowed tokens to -inf (logits past the
    /// tokenizer's vocabulary, a model's padding rows, are always disallowed).
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        let Some(allowed) = self.allowed_tokens()? else {
            return Ok(());
        };
        apply_mask(&allowed, self.factory.vocab_size(), logits);
        Ok(())
    }

    /// Advances past the sampled token. A token the mask disallowed is an
    /// [`Error::InvalidArgument`].
    pub fn commit(&mut self, token: u32) -> Result<()> {
        let (tail, opening) = match &mut self.state {
            State::Active(matcher) => {
                matcher
                    .consume_token(token)
                    .map_err(|e| Error::InvalidArgument(format!("token {token} breaks the constraint: {e}")))?;
                if matcher.is_stopped() && !self.triggers.is_empty() {
                    self.state = State::waiting();
                }
                return Ok(());
            }
            State::Waiting { tail, opening } => (tail, opening),
        };
        let piece = self.factory.piece(token);
        tail.extend_from_slice(piece);
        if let Some(text) = opening {
            text.extend_from_slice(piece);
        }
        let Some((trigger, rest)) = find_trigger(&self.triggers, tail, opening) else {
            return Ok(());
        };
        let mut matcher = self.triggers[trigger].fresh.clone();
        if !rest.is_empty() {
            // The token that completed the trigger went past it.
            let tokens = self.factory.factory.tok_env().tokenize_bytes(&rest);
            matcher.consume_tokens(&tokens).map_err(|e| {
                Error::InvalidArgument(format!(
                    "text after the trigger, {:?}, breaks the constraint: {e}",
                    String::from_utf8_lossy(&rest)
                ))
            })?;
        }
        self.state = State::Active(Box::new(matcher));
        Ok(())
    }

    /// Whether the text is complete: an eager constraint allows nothing more
    /// (or its end token was committed). A lazy one never finishes by itself.
    pub fn is_finished(&self) -> bool {
        match &self.state {
            State::Active(matcher) => self.triggers.is_empty() && matcher.is_stopped(),
            State::Waiting { .. } => false,
        }
    }

    /// Whether an end token is allowed now (the constrained text could stop
    /// here); true while a lazy constraint waits.
    pub fn can_finish(&mut self) -> bool {
        match &mut self.state {
            State::Active(matcher) => matcher.is_stopped() || matcher.is_accepting().unwrap_or(false),
            State::Waiting { .. } => true,
        }
    }
}

/// The trigger the text now contains, and the bytes after it; trims what
/// can no longer start one.
fn find_trigger(
    triggers: &[CompiledTrigger],
    tail: &mut Vec<u8>,
    opening: &mut Option<Vec<u8>>,
) -> Option<(usize, Vec<u8>)> {
    if let Some(text) = opening.as_mut() {
        let body = &text[preamble_len(text)..];
        let anchored = || triggers.iter().enumerate().filter(|(_, t)| t.at_start);
        if let Some((i, t)) = anchored().find(|(_, t)| body.starts_with(&t.text)) {
            return Some((i, body[t.text.len()..].to_vec()));
        }
        let may_still_open = if body.is_empty() {
            text.len() <= MAX_PREAMBLE
        } else {
            anchored().any(|(_, t)| t.text.starts_with(body))
        };
        if !may_still_open {
            *opening = None;
        }
    }
    let found = triggers
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.at_start)
        .filter_map(|(i, t)| find(tail, &t.text).map(|at| (at, i)))
        .min();
    if let Some((at, i)) = found {
        return Some((i, tail[at + triggers[i].text.len()..].to_vec()));
    }
    // Keep only what could still begin a trigger.
    let longest = triggers.iter().map(|t| t.text.len()).max().unwrap_or(0);
    let keep_from = tail.len().saturating_sub(longest.saturating_sub(1));
    tail.drain(..keep_from);
    None
}

/// The most text an `at_start` trigger may follow: whitespace and a code fence.
const MAX_PREAMBLE: usize = 32;

/// How much of `text` is whitespace and a Markdown code fence (```` ```json ````)
/// before a reply's content; a fence still being written counts whole.
fn preamble_len(text: &[u8]) -> usize {
    const FENCES: [&[u8]; 2] = [b"```json", b"```"];
    let spaces = |from: usize| text[from..].iter().take_while(|b| b.is_ascii_whitespace()).count();
    let start = spaces(0);
    let rest = &text[start..];
    if FENCES[0].starts_with(rest) {
        return text.len();
    }
    match FENCES.iter().find(|fence| rest.starts_with(fence)) {
        Some(fence) => start + fence.len() + spaces(start + fence.len()),
        None => start,
    }
}

/// The first occurrence of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

/// -inf where the mask's bit is clear, 32 logits per word.
fn apply_mask(allowed: &SimpleVob, vocab_size: usize, logits: &mut [f32]) {
    let covered = vocab_size.min(logits.len());
    let (inside, outside) = logits.split_at_mut(covered);
    outside.fill(f32::NEG_INFINITY);
    for (chunk, &word) in inside.chunks_mut(32).zip(allowed.as_slice()) {
        match word {
            u32::MAX => {}
            0 => chunk.fill(f32::NEG_INFINITY),
            _ => {
                for (bit, logit) in chunk.iter_mut().enumerate() {
                    if word & (1 << bit) == 0 {
                        *logit = f32::NEG_INFINITY;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_word_by_word() {
        let mut allowed = SimpleVob::alloc(70);
        allowed.allow_token(1);
        allowed.allow_range(32..=63);
        allowed.allow_token(69);
        let mut logits = vec![0.5f32; 72];
        apply_mask(&allowed, 70, &mut logits);
        let kept: Vec<usize> = (0..72).filter(|&i| logits[i].is_finite()).collect();
        let expected: Vec<usize> = [1].into_iter().chain(32..64).chain([69]).collect();
        assert_eq!(kept, expected);
    }

    #[test]
    fn constraints_move_to_the_thread_that_samples() {
        fn send<T: Send>() {}
        send::<Constraint>();
    }

    #[test]
    fn finds_triggers() {
        assert_eq!(find(b"abc<tool_call>", b"<tool_call>"), Some(3));
        assert_eq!(find(b"<tool", b"<tool_call>"), None);
    }

    #[test]
    fn skips_whitespace_and_code_fences_before_an_opening() {
        assert_eq!(preamble_len(b"  {"), 2);
        assert_eq!(preamble_len(b"\n```json\n{\"name\""), 9);
        assert_eq!(preamble_len(b"```\n{"), 4);
        assert_eq!(preamble_len(b" ``"), 3);
        assert_eq!(preamble_len(b"Sure {"), 0);
    }
}
