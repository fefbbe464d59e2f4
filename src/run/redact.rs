//! Replacing every known secret value with `[secret]` in engine output, logs and reports.

/// The secret values of a run; longest first, so that a secret containing another is replaced whole.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

/// Values shorter than this are not searched for: replacing every `a` or `1` would mangle the
/// output without protecting anything (docs/commands.md, "First run and secrets").
pub const SHORTEST: usize = 3;

/// Values shorter than this are replaced only as a whole word: a secret `pass` must not turn
/// "password" into "[secret]word", which shows the secret by implication.
pub const WHOLE_WORD_BELOW: usize = 8;

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut all = Vec::new();
        for secret in secrets {
            // Output is redacted line by line: a multi-line secret (a key, a certificate) is
            // also searched for line by line — a lone CR is a line break too (a line read ends
            // before it, a terminal returns at it).
            if secret.contains(['\n', '\r']) {
                all.extend(secret.split(['\n', '\r']).map(str::to_string));
            }
            // As JSON text shows it (a property's value in a diff): quotes, backslashes and
            // control characters escaped.
            let json = serde_json::to_string(&secret).unwrap_or_default();
            let escaped = json.strip_prefix('"').and_then(|j| j.strip_suffix('"'));
            if let Some(escaped) = escaped.filter(|e| *e != secret) {
                all.push(escaped.to_string());
            }
            all.push(secret);
        }
        let mut secrets: Vec<String> = all
            .into_iter()
            .filter(|s| s.trim().chars().count() >= SHORTEST)
            .collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Redactor { secrets }
    }

    /// This redactor with `more` secrets.
    pub fn with(&self, more: impl IntoIterator<Item = String>) -> Redactor {
        Redactor::new(self.secrets.iter().cloned().chain(more))
    }

    pub fn redact(&self, text: &str) -> String {
        let mut text = text.to_string();
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
}
