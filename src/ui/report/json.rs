//! The JSON report (`--report FILE`, `--output json`; docs/formats.md, "The run summary"): the
//! summary as serde writes it, with what a drift check found and the exit code last.

use super::RunSummary;

impl RunSummary {
    /// The summary as JSON, one object, ending with a line break.
    pub fn to_json(&self) -> String {
        let mut json = serde_json::to_value(self).expect("the summary serializes");
        // A drift check says what it found: the run went well, the expectation did not.
        if self.expect_no_changes {
            json["expect_no_changes"] = true.into();
            json["unexpected_changes"] = self.changed().into();
        }
        // The exit code last, as docs/commands.md says (the fields above were added after it).
        if let Some(object) = json.as_object_mut()
            && let Some(code) = object.remove("exit_code")
        {
            object.insert("exit_code".into(), code);
        }
        format!(
            "{}\n",
            serde_json::to_string_pretty(&json).expect("the summary serializes")
        )
    }
}
