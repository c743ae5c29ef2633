//! The regular expressions of llama.cpp's general pre-tokenizer path, matched
//! as its `unicode_regex_split_stl` matches them: C++ `std::regex` with the
//! ECMAScript grammar (libstdc++, "C" locale), iterated by
//! `std::regex_iterator`.
//!
//! A crate regex engine would not do: `std::regex` backtracks (alternatives
//! are tried in order, the first that lets the whole pattern match wins), its
//! `\s`, `\d` and `\w` are ASCII-only in the "C" locale, and llama.cpp feeds it
//! code points or one-byte category placeholders rather than UTF-8. This is a
//! small backtracking matcher over `u32` units for the subset of the grammar
//! llama.cpp's patterns use: literals, escapes, classes, groups, lookahead,
//! anchors, word boundaries and greedy or lazy quantifiers. Patterns are
//! parsed to a tree ([`Node`]) and compiled to a program whose choice points
//! are kept on a heap stack, so any length of text can be matched.

/// A compiled pattern.
#[derive(Debug)]
pub(crate) struct Regex {
    program: Program,
}

/// A parsed pattern.
#[derive(Debug)]
enum Node {
    /// One unit from a set (a literal, a class, `.`).
    Unit(Set),
    Concat(Vec<Node>),
    Alternation(Vec<Node>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: u32,
        greedy: bool,
    },
    Lookahead {
        node: Box<Node>,
        negate: bool,
    },
    Start,
    End,
    WordBoundary {
        negate: bool,
    },
}

/// ECMAScript's class escapes, "C" locale: ASCII only.
#[derive(Debug, Clone, Copy)]
enum Named {
    Digit,
    Space,
    Word,
}

impl Named {
    fn contains(self, unit: u32) -> bool {
        match self {
            Named::Digit => (0x30..=0x39).contains(&unit),
            Named::Space => matches!(unit, 0x09..=0x0D | 0x20),
            Named::Word => is_word(unit),
        }
    }
}

fn is_word(unit: u32) -> bool {
    matches!(unit, 0x30..=0x39 | 0x41..=0x5A | 0x61..=0x7A | 0x5F)
}

#[derive(Debug, Clone, Default)]
struct Set {
    negate: bool,
    ranges: Vec<(u32, u32)>,
    /// Named classes, each possibly complemented (`\S` in a class).
    named: Vec<(Named, bool)>,
}

impl Set {
    fn single(unit: u32) -> Set {
        Set {
            ranges: vec![(unit, unit)],
            ..Set::default()
        }
    }

    fn named(class: Named, complement: bool) -> Set {
        Set {
            named: vec![(class, complement)],
            ..Set::default()
        }
    }

    fn contains(&self, unit: u32) -> bool {
        let inside = self.ranges.iter().any(|&(lo, hi)| lo <= unit && unit <= hi)
            || self
                .named
                .iter()
                .any(|&(class, complement)| class.contains(unit) != complement);
        inside != self.negate
    }
}

/// Why a pattern does not compile (llama.cpp's `std::regex` would throw).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PatternError(pub(crate) String);

struct Parser<'a> {
    units: &'a [u32],
    at: usize,
}

impl Regex {
    pub(crate) fn new(pattern: &[u32]) -> Result<Regex, PatternError> {
        let mut parser = Parser { units: pattern, at: 0 };
        let root = parser.disjunction()?;
        if parser.at < pattern.len() {
            return Err(parser.error("unbalanced `)`"));
        }
        Ok(Regex {
            program: Program::compile(&root),
        })
    }

    /// `unicode_regex_split_stl` for one fragment: the lengths of the matches
    /// and of the text between them, in order. A match may be empty, and then
    /// so is its length, as there.
    pub(crate) fn split(&self, text: &[u32], out: &mut Vec<usize>) {
        let mut last_end = 0;
        for (start, end) in self.matches(text) {
            if start > last_end {
                out.push(start - last_end);
            }
            out.push(end - start);
            last_end = end;
        }
        if last_end < text.len() {
            out.push(text.len() - last_end);
        }
    }

    /// `std::regex_iterator`'s matches: after an empty match it first looks for
    /// a non-empty one at the same place, then searches on from the next unit.
    fn matches(&self, text: &[u32]) -> Vec<(usize, usize)> {
        let mut found = Vec::new();
        let mut next = self.search(text, 0, false);
        while let Some((start, end)) = next {
            found.push((start, end));
            let mut from = end;
            if start == end {
                if from == text.len() {
                    break;
                }
                next = self.search(text, from, true);
                if next.is_some() {
                    continue;
                }
                from += 1;
            }
            next = self.search(text, from, false);
        }
        found
    }

    /// `std::regex_search` from `from`; `anchored_non_empty` is its
    /// `match_continuous | match_not_null`.
    fn search(&self, text: &[u32], from: usize, anchored_non_empty: bool) -> Option<(usize, usize)> {
        let last_start = if anchored_non_empty { from } else { text.len() };
        (from..=last_start).find_map(|start| {
            self.program
                .run(text, start, anchored_non_empty)
                .map(|end| (start, end))
        })
    }
}

/// The pattern as a program for a backtracking machine whose choice points
/// live on a heap stack, so a long run of text costs memory, not native
/// stack (libstdc++ recurses, and overflows, where this does not).
#[derive(Debug)]
struct Program {
    insts: Vec<Inst>,
    /// Registers for the empty-iteration checks of loops.
    registers: usize,
}

#[derive(Debug)]
enum Inst {
    Unit(Set),
    /// A repeated single unit: the run is counted once, its lengths are the
    /// choices.
    UnitRepeat {
        set: Set,
        min: u32,
        max: u32,
        greedy: bool,
    },
    /// Go on at `first`; on failure, at `second`.
    Split {
        first: usize,
        second: usize,
    },
    Jump(usize),
    /// Remember where an optional iteration starts.
    Mark(usize),
    /// ECMAScript's rule: an optional iteration that matched nothing fails.
    Progress(usize),
    Lookahead {
        program: Box<Program>,
        negate: bool,
    },
    Start,
    End,
    WordBoundary {
        negate: bool,
    },
    Match,
}

/// A choice point, or a register value to restore on the way back.
enum Frame {
    Try {
        pc: usize,
        at: usize,
    },
    Restore {
        register: usize,
        value: usize,
    },
    /// The other lengths of a [`Inst::UnitRepeat`] run.
    Lengths {
        pc: usize,
        start: usize,
        len: usize,
        min: usize,
        run: usize,
        greedy: bool,
    },
}

impl Program {
    fn compile(root: &Node) -> Program {
        let mut program = Program {
            insts: Vec::new(),
            registers: 0,
        };
        program.emit(root);
        program.insts.push(Inst::Match);
        program
    }

    fn emit(&mut self, node: &Node) {
        match node {
            Node::Unit(set) => self.insts.push(Inst::Unit(set.clone())),
            Node::Concat(nodes) => nodes.iter().for_each(|n| self.emit(n)),
            Node::Alternation(options) => {
                // Split(option, next split) … each option jumps to the end.
                let mut jumps = Vec::new();
                for (i, option) in options.iter().enumerate() {
                    let split = self.insts.len();
                    let last = i + 1 == options.len();
                    if !last {
                        self.insts.push(Inst::Split { first: 0, second: 0 });
                    }
                    let start = self.insts.len();
                    self.emit(option);
                    if !last {
                        jumps.push(self.insts.len());
                        self.insts.push(Inst::Jump(0));
                        let second = self.insts.len();
                        self.insts[split] = Inst::Split { first: start, second };
                    }
                }
                let end = self.insts.len();
                for jump in jumps {
                    self.insts[jump] = Inst::Jump(end);
                }
            }
            Node::Repeat { node, min, max, greedy } => match &**node {
                Node::Unit(set) => self.insts.push(Inst::UnitRepeat {
                    set: set.clone(),
                    min: *min,
                    max: *max,
                    greedy: *greedy,
                }),
                node => self.emit_repeat(node, *min, *max, *greedy),
            },
            Node::Lookahead { node, negate } => self.insts.push(Inst::Lookahead {
                program: Box::new(Program::compile(node)),
                negate: *negate,
            }),
            Node::Start => self.insts.push(Inst::Start),
            Node::End => self.insts.push(Inst::End),
            Node::WordBoundary { negate } => self.insts.push(Inst::WordBoundary { negate: *negate }),
        }
    }

    /// `min` copies, then the optional iterations: a loop when unbounded,
    /// else `max - min` copies that each give up to the end.
    fn emit_repeat(&mut self, node: &Node, min: u32, max: u32, greedy: bool) {
        for _ in 0..min {
            self.emit(node);
        }
        let register = self.registers;
        self.registers += 1;
        let split = |first: usize, second: usize| {
            if greedy {
                Inst::Split { first, second }
            } else {
                Inst::Split {
                    first: second,
                    second: first,
                }
            }
        };
        if max == u32::MAX {
            let top = self.insts.len();
            self.insts.push(Inst::Jump(0)); // the split, once the exit is known
            self.insts.push(Inst::Mark(register));
            self.emit(node);
            self.insts.push(Inst::Progress(register));
            self.insts.push(Inst::Jump(top));
            let exit = self.insts.len();
            self.insts[top] = split(top + 1, exit);
        } else {
            let mut splits = Vec::new();
            for _ in min..max {
                splits.push(self.insts.len());
                self.insts.push(Inst::Jump(0));
                self.insts.push(Inst::Mark(register));
                self.emit(node);
                self.insts.push(Inst::Progress(register));
            }
            let exit = self.insts.len();
            for at in splits {
                self.insts[at] = split(at + 1, exit);
            }
        }
    }

    /// Matches at `start`; the end of the first match in ECMAScript's order.
    /// `non_empty` rejects empty matches (`match_not_null`).
    fn run(&self, text: &[u32], start: usize, non_empty: bool) -> Option<usize> {
        let mut registers = vec![usize::MAX; self.registers];
        let mut stack = Vec::new();
        let (mut pc, mut at) = (0, start);
        loop {
            let ok = match &self.insts[pc] {
                Inst::Unit(set) => {
                    let ok = at < text.len() && set.contains(text[at]);
                    at += usize::from(ok);
                    ok
                }
                Inst::UnitRepeat { set, min, max, greedy } => {
                    let run = text[at..]
                        .iter()
                        .take(*max as usize)
                        .take_while(|&&unit| set.contains(unit))
                        .count();
                    let min = *min as usize;
                    if run < min {
                        false
                    } else {
                        let len = if *greedy { run } else { min };
                        stack.push(Frame::Lengths {
                            pc: pc + 1,
                            start: at,
                            len,
                            min,
                            run,
                            greedy: *greedy,
                        });
                        at += len;
                        true
                    }
                }
                Inst::Split { first, second } => {
                    stack.push(Frame::Try { pc: *second, at });
                    pc = *first;
                    continue;
                }
                Inst::Jump(to) => {
                    pc = *to;
                    continue;
                }
                Inst::Mark(register) => {
                    stack.push(Frame::Restore {
                        register: *register,
                        value: registers[*register],
                    });
                    registers[*register] = at;
                    true
                }
                Inst::Progress(register) => registers[*register] != at,
                Inst::Lookahead { program, negate } => program.run(text, at, false).is_some() != *negate,
                Inst::Start => at == 0,
                Inst::End => at == text.len(),
                Inst::WordBoundary { negate } => {
                    let before = at > 0 && is_word(text[at - 1]);
                    let after = at < text.len() && is_word(text[at]);
                    (before != after) != *negate
                }
                Inst::Match => {
                    if !(non_empty && at == start) {
                        return Some(at);
                    }
                    false
                }
            };
            if ok {
                pc += 1;
                continue;
            }
            // Back to the latest choice point.
            loop {
                match stack.pop()? {
                    Frame::Try { pc: to, at: from } => {
                        (pc, at) = (to, from);
                        break;
                    }
                    Frame::Restore { register, value } => registers[register] = value,
                    Frame::Lengths {
                        pc: to,
                        start,
                        len,
                        min,
                        run,
                        greedy,
                    } => {
                        let next = if greedy {
                            len.checked_sub(1).filter(|&l| l >= min)
                        } else {
                            (len < run).then_some(len + 1)
                        };
                        if let Some(len) = next {
                            stack.push(Frame::Lengths {
                                pc: to,
                                start,
                                len,
                                min,
                                run,
                                greedy,
                            });
                            (pc, at) = (to, start + len);
                            break;
                        }
                    }
                }
            }
        }
    }
}

impl Parser<'_> {
    fn error(&self, what: &str) -> PatternError {
        PatternError(format!("{what} at {}", self.at))
    }

    fn peek(&self) -> Option<u32> {
        self.units.get(self.at).copied()
    }

    fn eat(&mut self, unit: char) -> bool {
        if self.peek() == Some(unit as u32) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn next_unit(&mut self) -> Result<u32, PatternError> {
        let unit = self.peek().ok_or_else(|| self.error("unexpected end"))?;
        self.at += 1;
        Ok(unit)
    }

    fn disjunction(&mut self) -> Result<Node, PatternError> {
        let mut options = vec![self.alternative()?];
        while self.eat('|') {
            options.push(self.alternative()?);
        }
        Ok(if options.len() == 1 {
            options.pop().expect("one option")
        } else {
            Node::Alternation(options)
        })
    }

    fn alternative(&mut self) -> Result<Node, PatternError> {
        let mut terms = Vec::new();
        while let Some(unit) = self.peek() {
            if unit == '|' as u32 || unit == ')' as u32 {
                break;
            }
            let atom = self.atom()?;
            let quantifiable = !matches!(
                atom,
                Node::Start | Node::End | Node::WordBoundary { .. } | Node::Lookahead { .. }
            );
            terms.push(if quantifiable { self.quantified(atom)? } else { atom });
        }
        Ok(Node::Concat(terms))
    }

    fn quantified(&mut self, atom: Node) -> Result<Node, PatternError> {
        let start = self.at;
        let (min, max) = match self.peek().and_then(char::from_u32) {
            Some('*') => (0, u32::MAX),
            Some('+') => (1, u32::MAX),
            Some('?') => (0, 1),
            Some('{') => {
                self.at += 1;
                let min = self.number().ok_or_else(|| self.error("bad `{`"))?;
                let max = if self.eat(',') {
                    self.number().unwrap_or(u32::MAX)
                } else {
                    min
                };
                if self.peek() != Some('}' as u32) || max < min {
                    self.at = start;
                    return Err(self.error("bad `{}` quantifier"));
                }
                (min, max)
            }
            _ => return Ok(atom),
        };
        self.at += 1;
        let greedy = !self.eat('?');
        Ok(Node::Repeat {
            node: Box::new(atom),
            min,
            max,
            greedy,
        })
    }

    fn number(&mut self) -> Option<u32> {
        let start = self.at;
        let mut value: u32 = 0;
        while let Some(digit) = self.peek().and_then(char::from_u32).and_then(|c| c.to_digit(10)) {
            value = value.saturating_mul(10).saturating_add(digit);
            self.at += 1;
        }
        (self.at > start).then_some(value)
    }

    fn atom(&mut self) -> Result<Node, PatternError> {
        let unit = self.next_unit()?;
        Ok(match char::from_u32(unit) {
            Some('^') => Node::Start,
            Some('$') => Node::End,
            Some('.') => Node::Unit(Set {
                negate: true,
                ranges: vec![(0x0A, 0x0A), (0x0D, 0x0D)],
                named: Vec::new(),
            }),
            Some('(') => {
                let lookahead = if self.eat('?') {
                    match self.next_unit().map(char::from_u32)? {
                        Some(':') => None,
                        Some('=') => Some(false),
                        Some('!') => Some(true),
                        _ => return Err(self.error("unsupported group")),
                    }
                } else {
                    None
                };
                let inner = self.disjunction()?;
                if !self.eat(')') {
                    return Err(self.error("missing `)`"));
                }
                match lookahead {
                    Some(negate) => Node::Lookahead {
                        node: Box::new(inner),
                        negate,
                    },
                    None => inner,
                }
            }
            Some('[') => Node::Unit(self.class()?),
            Some('\\') => match self.peek().and_then(char::from_u32) {
                Some('b') => {
                    self.at += 1;
                    Node::WordBoundary { negate: false }
                }
                Some('B') => {
                    self.at += 1;
                    Node::WordBoundary { negate: true }
                }
                _ => Node::Unit(self.escape()?),
            },
            Some('*' | '+' | '?' | ')') => return Err(self.error("nothing to repeat")),
            _ => Node::Unit(Set::single(unit)),
        })
    }

    /// After a `\`: a class escape or one unit.
    fn escape(&mut self) -> Result<Set, PatternError> {
        let unit = self.next_unit()?;
        let named = |class, complement| Ok(Set::named(class, complement));
        match char::from_u32(unit) {
            Some('d') => named(Named::Digit, false),
            Some('D') => named(Named::Digit, true),
            Some('s') => named(Named::Space, false),
            Some('S') => named(Named::Space, true),
            Some('w') => named(Named::Word, false),
            Some('W') => named(Named::Word, true),
            _ => Ok(Set::single(self.escaped_unit(unit)?)),
        }
    }

    /// The unit a character escape stands for (`\n`, `\x41`, `\.`, …).
    fn escaped_unit(&mut self, unit: u32) -> Result<u32, PatternError> {
        Ok(match char::from_u32(unit) {
            Some('n') => 0x0A,
            Some('r') => 0x0D,
            Some('t') => 0x09,
            Some('v') => 0x0B,
            Some('f') => 0x0C,
            Some('0') => 0,
            Some('x') => self.hex(2)?,
            Some('u') => self.hex(4)?,
            Some(c) if c.is_ascii_alphanumeric() => return Err(self.error("unsupported escape")),
            _ => unit,
        })
    }

    fn hex(&mut self, digits: usize) -> Result<u32, PatternError> {
        let mut value = 0;
        for _ in 0..digits {
            let digit = char::from_u32(self.next_unit()?)
                .and_then(|c| c.to_digit(16))
                .ok_or_else(|| self.error("bad hex escape"))?;
            value = value * 16 + digit;
        }
        Ok(value)
    }

    /// After a `[`: the class up to its `]`.
    fn class(&mut self) -> Result<Set, PatternError> {
        let mut set = Set {
            negate: self.eat('^'),
            ..Set::default()
        };
        loop {
            let unit = self.next_unit()?;
            if unit == ']' as u32 {
                return Ok(set);
            }
            let low = match self.class_atom(unit)? {
                ClassAtom::Unit(low) => low,
                ClassAtom::Named(class, complement) => {
                    set.named.push((class, complement));
                    continue;
                }
            };
            let is_range = self.peek() == Some('-' as u32) && self.units.get(self.at + 1) != Some(&(']' as u32));
            if !is_range {
                set.ranges.push((low, low));
                continue;
            }
            self.at += 1;
            let high_unit = self.next_unit()?;
            match self.class_atom(high_unit)? {
                ClassAtom::Unit(high) if low <= high => set.ranges.push((low, high)),
                _ => return Err(self.error("bad class range")),
            }
        }
    }

    fn class_atom(&mut self, unit: u32) -> Result<ClassAtom, PatternError> {
        if unit != '\\' as u32 {
            return Ok(ClassAtom::Unit(unit));
        }
        let escaped = self.next_unit()?;
        Ok(match char::from_u32(escaped) {
            Some('d') => ClassAtom::Named(Named::Digit, false),
            Some('D') => ClassAtom::Named(Named::Digit, true),
            Some('s') => ClassAtom::Named(Named::Space, false),
            Some('S') => ClassAtom::Named(Named::Space, true),
            Some('w') => ClassAtom::Named(Named::Word, false),
            Some('W') => ClassAtom::Named(Named::Word, true),
            // Backspace, inside a class.
            Some('b') => ClassAtom::Unit(0x08),
            _ => ClassAtom::Unit(self.escaped_unit(escaped)?),
        })
    }
}

enum ClassAtom {
    Unit(u32),
    Named(Named, bool),
}

#[cfg(test)]
mod tests {
    use super::Regex;

    fn units(s: &str) -> Vec<u32> {
        s.chars().map(|c| c as u32).collect()
    }

    fn split(pattern: &str, text: &str) -> Vec<String> {
        let regex = Regex::new(&units(pattern)).unwrap();
        let chars: Vec<char> = text.chars().collect();
        let mut lengths = Vec::new();
        regex.split(&units(text), &mut lengths);
        let mut at = 0;
        lengths
            .into_iter()
            .map(|n| {
                at += n;
                chars[at - n..at].iter().collect()
            })
            .collect()
    }

    #[test]
    fn alternatives_are_tried_in_order() {
        assert_eq!(split("a|ab", "ab"), ["a", "b"]);
        assert_eq!(split("ab|a", "ab"), ["ab"]);
    }

    #[test]
    fn classes_and_escapes_are_ascii() {
        assert_eq!(split("\\s+", "a \u{0B}\u{A0}b"), ["a", " \u{0B}", "\u{A0}b"]);
        assert_eq!(split("[^\\s\\d]+", "ab 12cd"), ["ab", " 12", "cd"]);
        assert_eq!(split("[\\[-\\]]", "a\\b"), ["a", "\\", "b"]);
        assert_eq!(split("\\w+", "héllo_1"), ["h", "é", "llo_1"]);
    }

    #[test]
    fn lookahead_and_anchors() {
        assert_eq!(split("\\s+(?!\\S)", "a   b"), ["a", "  ", " b"]);
        assert_eq!(split("\\s+$", "a  "), ["a", "  "]);
        assert_eq!(split("(?=(\\d{3})+(?!\\d))", "1234567"), ["1", "", "234", "", "567"]);
    }

    #[test]
    fn long_runs_cost_heap_not_stack() {
        // libstdc++ recurses per iteration here and overflows its stack
        // long before this; the test thread has 2 MiB.
        let word = "AB".repeat(100_000);
        assert_eq!(split("((?=[A-Z])([^a-z]))+", &word), [word.as_str()]);
    }

    #[test]
    fn quantifiers() {
        assert_eq!(split("(A|B){1,2}Z", "ABZ AAAZ"), ["ABZ", " A", "AAZ"]);
        assert_eq!(split("a+?", "aa"), ["a", "a"]);
        assert_eq!(split("(?:ab)*c", "ababc"), ["ababc"]);
    }
}
