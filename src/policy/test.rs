//! `mara policy test` (docs/commands.md, "Policies"): every `test_` rule of every package, as
//! `opa test` runs them — with no input (a test gives its own, `with input as …`); a test passes
//! when it is true, fails when it is false or undefined, and errs when its evaluation fails.

use serde::Serialize;

use super::Policies;

/// How one test came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Fail,
    Error,
}

/// One test: `data.<package>.<rule>`, how it came out, and why it erred.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tested {
    pub test: String,
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Policies {
    /// Runs every test, in package and name order.
    pub fn test(&mut self) -> Vec<Tested> {
        let tests: Vec<String> = (self.all_rules.iter())
            .flat_map(|(package, rules)| {
                (rules.iter())
                    .filter(|r| r.starts_with("test_"))
                    .map(move |r| format!("data.{package}.{r}"))
            })
            .collect();
        self.engine.set_input(regorus::Value::Undefined);
        tests
            .into_iter()
            .map(|test| {
                let (outcome, error) = match self.engine.eval_rule(test.clone()) {
                    Ok(regorus::Value::Bool(true)) => (Outcome::Pass, None),
                    Ok(_) => (Outcome::Fail, None),
                    Err(e) => {
                        let (at, message) = super::rules::located(&format!("{e:#}"));
                        let error = match at {
                            Some(at) => format!("{at}: {message}"),
                            None => message,
                        };
                        (Outcome::Error, Some(error))
                    }
                };
                Tested {
                    test,
                    outcome,
                    error,
                }
            })
            .collect()
    }
}
