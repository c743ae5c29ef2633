//! llama.cpp's GBNF, rewritten into llguidance's Lark dialect.
//!
//! Lark already has GBNF's operators (`*`, `+`, `?`, `{m,n}`, groups,
//! alternatives, `<|special|>` tokens); what differs is the rule syntax
//! (`name ::= ...`, rule ends at a newline outside parentheses), rule names
//! (GBNF allows capitals and `-`, which Lark reserves or rejects), string
//! escapes and character classes. Strings become JSON strings and classes
//! become regexes whose every non-alphanumeric character is written as
//! `\x{..}`, so nothing in them can read as regex syntax. The rules follow
//! llama.cpp's `src/llama-grammar.cpp` parser.

use crate::{Error, Result};

/// The GBNF grammar as Lark, its `root` rule as `start`.
pub fn to_lark(gbnf: &str) -> Result<String> {
    let mut parser = Parser {
        chars: gbnf.chars().collect(),
        pos: 0,
    };
    let mut lark = String::new();
    let mut has_root = false;
    parser.skip_space(true);
    while !parser.at_end() {
        let name = parser.name()?;
        has_root |= name == "root";
        parser.skip_space(false);
        if !parser.eat_str("::=") {
            return Err(parser.error("expected ::="));
        }
        parser.skip_space(true);
        let body = parser.alternatives(false)?;
        match parser.peek() {
            None | Some('\n') | Some('\r') => {}
            Some(_) => return Err(parser.error("expected the end of the rule")),
        }
        parser.skip_space(true);
        lark.push_str(&format!("{}: {body}\n", rule_name(&name)));
    }
    if !has_root {
        return Err(Error::InvalidArgument("GBNF grammar: no root rule".into()));
    }
    Ok(format!("start: {}\n{lark}", rule_name("root")))
}

/// An injective map from GBNF names (`[A-Za-z0-9_-]+`) to Lark rule names
/// (lowercase): `_` doubles, `-` is `_h`, a capital is `_u` and its lowercase.
fn rule_name(gbnf: &str) -> String {
    let mut name = String::from("g_");
    for c in gbnf.chars() {
        match c {
            '_' => name.push_str("__"),
            '-' => name.push_str("_h"),
            c if c.is_ascii_uppercase() => {
                name.push_str("_u");
                name.push(c.to_ascii_lowercase());
            }
            c => name.push(c),
        }
    }
    name
}

/// A message about the Lark grammar [`to_lark`] wrote, with each rule name
/// in it (`g_ws_h_utail`) written as the GBNF grammar names it (`ws-Tail`), so
/// that an error speaks of the user's rules, not of generated ones.
pub fn with_gbnf_names(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("g_") {
        let starts_word = !rest[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        let name_len = rest[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len() - at);
        let lark = &rest[at..at + name_len];
        out.push_str(&rest[..at]);
        match gbnf_name(lark).filter(|_| starts_word) {
            Some(name) => out.push_str(&name),
            None => out.push_str(lark),
        }
        rest = &rest[at + name_len..];
    }
    out.push_str(rest);
    out
}

/// The GBNF name [`rule_name`] maps to `lark`, if it is one of its names.
fn gbnf_name(lark: &str) -> Option<String> {
    let mut chars = lark.strip_prefix("g_")?.chars();
    let mut name = String::new();
    while let Some(c) = chars.next() {
        if c != '_' {
            name.push(c);
            continue;
        }
        match chars.next()? {
            '_' => name.push('_'),
            'h' => name.push('-'),
            'u' => name.push(chars.next()?.to_ascii_uppercase()),
            _ => return None,
        }
    }
    (!name.is_empty()).then_some(name)
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.peek() == Some(c);
        self.pos += found as usize;
        found
    }

    fn eat_str(&mut self, s: &str) -> bool {
        let matches = s
            .chars()
            .enumerate()
            .all(|(i, c)| self.chars.get(self.pos + i) == Some(&c));
        if matches {
            self.pos += s.chars().count();
        }
        matches
    }

    fn error(&self, what: &str) -> Error {
        let line = self.chars[..self.pos.min(self.chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count()
            + 1;
        let context: String = self.chars[self.pos.min(self.chars.len())..].iter().take(20).collect();
        Error::InvalidArgument(format!("GBNF grammar, line {line}: {what} at {context:?}"))
    }

    /// Spaces, tabs and `#` comments; newlines too where a rule may go on.
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\n' | '\r' if newlines => self.pos += 1,
                '#' => {
                    while !matches!(self.peek(), None | Some('\n') | Some('\r')) {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn is_name_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '_' || c == '-'
    }

    fn name(&mut self) -> Result<String> {
        let start = self.pos;
        while self.peek().is_some_and(Self::is_name_char) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.error("expected a rule name"));
        }
        Ok(self.chars[start..self.pos].iter().collect())
    }

    fn alternatives(&mut self, nested: bool) -> Result<String> {
        let mut alternatives = vec![self.sequence(nested)?];
        while self.eat('|') {
            self.skip_space(true);
            alternatives.push(self.sequence(nested)?);
        }
        Ok(alternatives.join(" | "))
    }

    fn sequence(&mut self, nested: bool) -> Result<String> {
        let mut items: Vec<String> = Vec::new();
        while let Some(c) = self.peek() {
            let item = match c {
                '"' => {
                    self.pos += 1;
                    let mut text = String::new();
                    while !self.eat('"') {
                        if self.at_end() {
                            return Err(self.error("unterminated string"));
                        }
                        text.push(self.char()?);
                    }
                    serde_json::to_string(&text).expect("a string always serializes")
                }
                '[' => self.class()?,
                '(' => {
                    self.pos += 1;
                    self.skip_space(true);
                    let inner = self.alternatives(true)?;
                    if !self.eat(')') {
                        return Err(self.error("expected )"));
                    }
                    format!("({inner})")
                }
                '.' => {
                    self.pos += 1;
                    "/(?s:.)/".to_string()
                }
                '<' => {
                    // A token by name or id, <|im_end|> or <[151645]>: the same in Lark.
                    let start = self.pos;
                    while !self.eat('>') {
                        if self.at_end() || self.peek() == Some('\n') {
                            return Err(self.error("unterminated token reference"));
                        }
                        self.pos += 1;
                    }
                    self.chars[start..self.pos].iter().collect()
                }
                '*' | '+' | '?' | '{' => {
                    let Some(last) = items.last_mut() else {
                        return Err(self.error("a repetition needs something to repeat"));
                    };
                    let op = if c == '{' {
                        self.braces()?
                    } else {
                        self.pos += 1;
                        c.to_string()
                    };
                    // (x)* rather than x* on a multi-part item, to keep the
                    // operator's reach.
                    *last = format!("({last}){op}");
                    self.skip_space(nested);
                    continue;
                }
                c if Self::is_name_char(c) => rule_name(&self.name()?),
                _ => break,
            };
            items.push(item);
            self.skip_space(nested);
        }
        Ok(if items.is_empty() {
            "\"\"".to_string()
        } else {
            items.join(" ")
        })
    }

    /// `{m}`, `{m,}` or `{m,n}` (checked, then written back as Lark reads it).
    fn braces(&mut self) -> Result<String> {
        self.pos += 1;
        let number = |p: &mut Parser| -> Option<u32> {
            let start = p.pos;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.pos += 1;
            }
            p.chars[start..p.pos].iter().collect::<String>().parse().ok()
        };
        self.skip_space(false);
        let min = number(self).ok_or_else(|| self.error("expected a repetition count"))?;
        self.skip_space(false);
        let op = if self.eat(',') {
            self.skip_space(false);
            match number(self) {
                Some(max) if max < min => return Err(self.error("repetition maximum below its minimum")),
                Some(max) => format!("{{{min},{max}}}"),
                None => format!("{{{min},}}"),
            }
        } else {
            format!("{{{min}}}")
        };
        self.skip_space(false);
        if !self.eat('}') {
            return Err(self.error("expected }"));
        }
        Ok(op)
    }

    /// `[...]`: a regex of the same characters, each written so that nothing
    /// in it is regex syntax.
    fn class(&mut self) -> Result<String> {
        self.pos += 1;
        let mut regex = String::from("/[");
        if self.eat('^') {
            regex.push('^');
        }
        while !self.eat(']') {
            if self.at_end() {
                return Err(self.error("unterminated character class"));
            }
            let first = self.char()?;
            regex.push_str(&regex_char(first));
            if self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|&c| c != ']') {
                self.pos += 1;
                let last = self.char()?;
                regex.push('-');
                regex.push_str(&regex_char(last));
            }
        }
        regex.push_str("]/");
        Ok(regex)
    }

    /// One character of a string or class, escapes decoded as llama.cpp's
    /// `parse_char` does.
    fn char(&mut self) -> Result<char> {
        let c = self.peek().ok_or_else(|| self.error("unexpected end"))?;
        self.pos += 1;
        if c != '\\' {
            return Ok(c);
        }
        let escape = self.peek().ok_or_else(|| self.error("unexpected end after \\"))?;
        self.pos += 1;
        let digits = match escape {
            'x' => 2,
            'u' => 4,
            'U' => 8,
            't' => return Ok('\t'),
            'r' => return Ok('\r'),
            'n' => return Ok('\n'),
            '\\' | '"' | '[' | ']' => return Ok(escape),
            _ => return Err(self.error(&format!("unknown escape \\{escape}"))),
        };
        let hex: String = self.chars[self.pos..].iter().take(digits).collect();
        self.pos += hex.len();
        u32::from_str_radix(&hex, 16)
            .ok()
            .filter(|_| hex.len() == digits)
            .and_then(char::from_u32)
            .ok_or_else(|| self.error(&format!("bad escape \\{escape}{hex}")))
    }
}

fn regex_char(c: char) -> String {
    if c.is_ascii_alphanumeric() {
        c.to_string()
    } else {
        format!("\\x{{{:X}}}", c as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_rules_strings_classes_and_repeats() {
        let gbnf = "root ::= answer ws-Tail # the reply\nanswer ::= (\"yes\" | \"no\\n\")\n  ws-Tail ::= [ \\t\\n]{0,2} [^a-z\\]]*\n";
        let lark = to_lark(gbnf).unwrap();
        assert_eq!(
            lark,
            "start: g_root\n\
             g_root: g_answer g_ws_h_utail\n\
             g_answer: (\"yes\" | \"no\\n\")\n\
             g_ws_h_utail: (/[\\x{20}\\x{9}\\x{A}]/){0,2} (/[^a-z\\x{5D}]/)*\n"
        );
    }

    #[test]
    fn keeps_multi_line_groups_and_empty_alternatives() {
        let lark = to_lark("root ::= (\n  \"a\" |\n  \"b\"\n) space\nspace ::= | \" \"\n").unwrap();
        assert_eq!(
            lark,
            "start: g_root\ng_root: (\"a\" | \"b\") g_space\ng_space: \"\" | \" \"\n"
        );
    }

    #[test]
    fn speaks_of_the_grammars_own_rule_names() {
        for name in ["root", "ws-Tail", "a_b", "X9", "-_-"] {
            assert_eq!(gbnf_name(&rule_name(name)).as_deref(), Some(name));
        }
        assert_eq!(
            with_gbnf_names("unknown name: g_fo_uo (in g_root); keep big_deal, g_, g_x_q"),
            "unknown name: foO (in root); keep big_deal, g_, g_x_q"
        );
    }

    #[test]
    fn names_the_broken_part() {
        let err = to_lark("root ::= \"a\" \\q").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
        assert!(to_lark("item ::= \"a\"").unwrap_err().to_string().contains("no root"));
        assert!(to_lark("root ::= [a-")
            .unwrap_err()
            .to_string()
            .contains("unterminated"));
    }
}
