//! Replacing every known secret value with `[secret]` in engine output, logs and reports.
//!
//! A secret that holds line breaks (a key, a certificate, a password with a CR in it) is found
//! whatever became of its breaks on the way out (docs/commands.md, "First run and secrets"):
//! whole, with each break as a CR, an LF or a CRLF, raw or escaped (`\r`, `\n`, escaped again
//! inside escaped text); line by line, its parts on their own; and across lines, where the
//! program or its engine broke the line at the secret's break: the line that goes on with the
//! secret the line before ended with has that part replaced, whatever stands beside it.

use regex::Regex;

/// The secret values of a run; longest first, so that a secret containing another is replaced whole.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// The values as given, from which the rest is made again (`with`).
    given: Vec<String>,
    /// What is searched for as text: every value, its parts, as JSON text shows it.
    secrets: Vec<String>,
    /// The values that hold line breaks.
    broken: Vec<Broken>,
}

/// A secret that holds line breaks: its parts between them, and the pattern that finds it whole
/// whatever its breaks became.
#[derive(Debug, Clone)]
struct Broken {
    parts: Vec<String>,
    whole: Option<Regex>,
}

/// One line break as output may show it: CR, LF or CRLF, raw or escaped once or more.
const BREAK: &str = r"(?:\r\n|\r|\n|\\+r\\+n|\\+r|\\+n)";

/// Values shorter than this are not searched for: replacing every `a` or `1` would mangle the
/// output without protecting anything (docs/commands.md, "First run and secrets").
pub const SHORTEST: usize = 3;

/// Values shorter than this are replaced only as a whole word: a secret `pass` must not turn
/// "password" into "[secret]word", which shows the secret by implication.
pub const WHOLE_WORD_BELOW: usize = 8;

/// What a stream's lines so far say of a secret broken across them: the last line that was not
/// blank, as it came (in memory only).
#[derive(Debug, Default)]
pub struct Continued {
    previous: Option<String>,
}

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let given: Vec<String> = secrets.into_iter().collect();
        let mut all = Vec::new();
        let mut broken = Vec::new();
        for secret in &given {
            let parts = parts(secret);
            // Output is redacted line by line: a multi-line secret is also searched for line
            // by line — a lone CR is a line break too (a line read ends before it, a terminal
            // returns at it).
            if secret.contains(['\n', '\r']) {
                all.extend(parts.iter().map(|p| p.to_string()));
            }
            if parts.len() > 1 {
                // A short one is searched for only as its words, as any short secret is.
                let long = secret.chars().count() >= WHOLE_WORD_BELOW;
                broken.push(Broken {
                    whole: long.then(|| whole(secret, &parts)).flatten(),
                    parts: parts.iter().map(|p| p.to_string()).collect(),
                });
            }
            // As JSON text shows it (a property's value in a diff): quotes, backslashes and
            // control characters escaped.
            if let Some(escaped) = json_text(secret).filter(|e| e != secret) {
                all.push(escaped);
            }
            all.push(secret.clone());
        }
        let mut secrets: Vec<String> = all
            .into_iter()
            .filter(|s| s.trim().chars().count() >= SHORTEST)
            .collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Redactor {
            given,
            secrets,
            broken,
        }
    }

    /// This redactor with `more` secrets.
    pub fn with(&self, more: impl IntoIterator<Item = String>) -> Redactor {
        Redactor::new(self.given.iter().cloned().chain(more))
    }

    pub fn redact(&self, text: &str) -> String {
        let mut text = text.to_string();
        for broken in &self.broken {
            if let Some(whole) = &broken.whole
                && whole.is_match(&text)
            {
                text = whole.replace_all(&text, "[secret]").into_owned();
            }
        }
        for secret in &self.secrets {
            if !text.contains(secret.as_str()) {
                continue;
            }
            text = match secret.chars().count() < WHOLE_WORD_BELOW {
                true => replace_words(&text, secret),
                false => text.replace(secret.as_str(), "[secret]"),
            };
        }
        text
    }

    /// `line`, the next line of a stream whose lines so far `continued` follows, redacted: as
    /// `redact` does, and where it goes on with a secret the line before ended with (the
    /// program or its engine broke the line at the secret's break), the part that goes on is
    /// replaced too, whatever its length and whatever stands beside it.
    pub fn redact_next(&self, continued: &mut Continued, line: &str) -> String {
        if self.broken.is_empty() {
            return self.redact(line);
        }
        let shown = match &continued.previous {
            Some(previous) => self.redact(&self.going_on(previous, line)),
            None => self.redact(line),
        };
        if !line.trim().is_empty() {
            continued.previous = Some(line.to_string());
        }
        shown
    }

    /// `line` with each part of a broken secret that goes on from the end of `previous`
    /// replaced: the part that follows the one `previous` ends with, where only what
    /// `previous` began with too (an engine's prefix of its lines) stands before it.
    fn going_on(&self, previous: &str, line: &str) -> String {
        let mut found: Vec<(usize, usize)> = Vec::new();
        for broken in &self.broken {
            for pair in broken.parts.windows(2) {
                let (end, next) = (&pair[0], &pair[1]);
                if end.trim().chars().count() < SHORTEST || !previous.ends_with(end.as_str()) {
                    continue;
                }
                let at = (line.match_indices(next.as_str()))
                    .map(|(at, _)| at)
                    .find(|&at| previous.starts_with(&line[..at]));
                if let Some(at) = at {
                    found.push((at, at + next.len()));
                }
            }
        }
        found.sort_unstable();
        let mut out = String::with_capacity(line.len());
        let mut done = 0;
        for (start, end) in found {
            if start < done {
                continue;
            }
            out.push_str(&line[done..start]);
            out.push_str("[secret]");
            done = end;
        }
        out.push_str(&line[done..]);
        out
    }
}

/// A secret's parts between its line breaks (a CRLF is one break), without the empty ones a
/// break at its start or end, or two in a row, leave.
fn parts(secret: &str) -> Vec<&str> {
    secret
        .split("\r\n")
        .flat_map(|p| p.split(['\r', '\n']))
        .filter(|p| !p.is_empty())
        .collect()
}

/// The pattern of `secret`, made of `parts`, whatever its breaks became: each part as it is or
/// as JSON text shows it, one break or more between them (and its own at its start or end, if
/// it has them). `None` when it cannot be built (a pattern past the library's size limit): the
/// parts are still searched for.
fn whole(secret: &str, parts: &[&str]) -> Option<Regex> {
    let shown: Vec<String> = (parts.iter())
        .map(|part| {
            let escaped = json_text(part).unwrap_or_default();
            match escaped.is_empty() || escaped == *part {
                true => regex::escape(part),
                false => format!("(?:{}|{})", regex::escape(part), regex::escape(&escaped)),
            }
        })
        .collect();
    let ends = |broken: bool| {
        if broken {
            format!("{BREAK}*")
        } else {
            String::new()
        }
    };
    let (start, end) = (
        ends(secret.starts_with(['\r', '\n'])),
        ends(secret.ends_with(['\r', '\n'])),
    );
    let between = shown.join(&format!("{BREAK}+"));
    Regex::new(&format!("{start}{between}{end}")).ok()
}

/// `text` as it stands between the quotes of a JSON string.
fn json_text(text: &str) -> Option<String> {
    let json = serde_json::to_string(text).ok()?;
    Some(json.strip_prefix('"')?.strip_suffix('"')?.to_string())
}

/// `text` with each occurrence of `word` that stands alone (no letter, digit or `_` on either
/// side) replaced.
fn replace_words(text: &str, word: &str) -> String {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut before: Option<char> = None;
    while let Some(at) = rest.find(word) {
        let (head, tail) = rest.split_at(at);
        let prev = head.chars().next_back().or(before);
        let next = tail[word.len()..].chars().next();
        out.push_str(head);
        if prev.is_some_and(is_word) || next.is_some_and(is_word) {
            // Not a word of its own: keep its first character and look again after it.
            let first = tail.chars().next().expect("the match is not empty");
            out.push(first);
            before = Some(first);
            rest = &tail[first.len_utf8()..];
        } else {
            out.push_str("[secret]");
            before = word.chars().next_back();
            rest = &tail[word.len()..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_found_as_json_text_shows_it_too() {
        let redactor = Redactor::new(["p\"ss\\w0rd".to_string()]);
        assert_eq!(
            redactor.redact(r#"~ password: "old" => "p\"ss\\w0rd""#),
            r#"~ password: "old" => "[secret]""#
        );
        assert_eq!(redactor.redact("p\"ss\\w0rd"), "[secret]");
    }

    #[test]
    fn every_occurrence_longest_first() {
        let r = Redactor::new([
            "hunter2".to_string(),
            "hunter2-extra".to_string(),
            "x".to_string(),
        ]);
        assert_eq!(
            r.redact("a hunter2-extra b hunter2 x"),
            "a [secret] b [secret] x"
        );
    }

    #[test]
    fn a_short_secret_is_replaced_only_as_a_word() {
        let r = Redactor::new(["pass".to_string()]);
        assert_eq!(r.redact("password: pass"), "password: [secret]");
        assert_eq!(
            r.redact("pass,pass.bypass pass_x"),
            "[secret],[secret].bypass pass_x"
        );
        assert_eq!(r.redact("xpasspass pass"), "xpasspass [secret]");
    }

    #[test]
    fn a_multi_line_secret_is_replaced_line_by_line() {
        let key = "-----BEGIN KEY-----\nMIIEabcdefghijk\nZZZZsecondline\n-----END KEY-----\n";
        let r = Redactor::new([key.to_string()]);
        for line in key.lines() {
            assert_eq!(r.redact(&format!("  {line}  ")), "  [secret]  ", "{line}");
        }
        assert_eq!(r.redact(key), "[secret]");
    }

    #[test]
    fn a_secret_split_by_a_cr_is_found_whatever_its_break_became() {
        let r = Redactor::new(["Sup3rS3cretDb\rPw-1".to_string()]);
        for shown in [
            "Sup3rS3cretDb\rPw-1",
            "Sup3rS3cretDb\r\nPw-1",
            r"Sup3rS3cretDb\rPw-1",
            r"Sup3rS3cretDb\nPw-1",
            r"Sup3rS3cretDb\r\nPw-1",
            r"Sup3rS3cretDb\\rPw-1",
        ] {
            assert_eq!(
                r.redact(&format!("pw=\"{shown}\"x")),
                "pw=\"[secret]\"x",
                "{shown:?}"
            );
        }
        // Its short part, where it stands on its own only.
        assert_eq!(r.redact("Pw-1, Pw-10"), "[secret], Pw-10");
    }

    #[test]
    fn a_secret_broken_across_lines_is_found_where_the_next_line_goes_on_with_it() {
        let r = Redactor::new(["Sup3rS3cretDb\r\nPw-1".to_string()]);
        let mut continued = Continued::default();
        let prefix = "terraform_data.x: (local-exec): ";
        let shown: Vec<String> = [
            format!("{prefix}pw=Sup3rS3cretDb"),
            String::new(),
            format!("{prefix}Pw-1_end"),
            format!("{prefix}Pw-1_end"),
        ]
        .iter()
        .map(|line| r.redact_next(&mut continued, line))
        .collect();
        assert_eq!(
            shown,
            [
                format!("{prefix}pw=[secret]"),
                String::new(),
                format!("{prefix}[secret]_end"),
                // Not after a line that ended with the secret's first part.
                format!("{prefix}Pw-1_end"),
            ]
        );
        // Only what the line before began with too may stand before the part.
        let mut continued = Continued::default();
        r.redact_next(&mut continued, "Sup3rS3cretDb");
        assert_eq!(r.redact_next(&mut continued, "xPw-1_end"), "xPw-1_end");
    }
}
