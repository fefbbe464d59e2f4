//! The pulumi command line as cobra/pflag parse it, checked against `pulumi-flags.json` (the real
//! CLI's flags, v3.259): the command path, its flags (globals anywhere, `--f v`, `--f=v`, `-s v`,
//! `-sv`, combined bool shorts, optional-value flags only with `=`), positionals, `--`.
//!
//! Any flag the real CLI would reject is rejected with its message and exit code 1.

use std::collections::BTreeMap;

use serde_json::Value;

const FLAGS_JSON: &str = include_str!("../pulumi-flags.json");

#[derive(Debug, Clone)]
pub struct FlagSpec {
    pub long: String,
    pub short: Option<char>,
    pub takes_value: bool,
    pub no_opt_default: Option<String>,
    pub requires_env: Option<(String, String)>,
}

impl FlagSpec {
    fn from_json(value: &Value) -> FlagSpec {
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
        FlagSpec {
            long: text("long").unwrap_or_default(),
            short: text("short").and_then(|s| s.chars().next()),
            takes_value: value
                .get("takes_value")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            no_opt_default: text("no_opt_default"),
            requires_env: text("requires_env").and_then(|r| {
                r.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            }),
        }
    }
}

/// The flag table of the real CLI.
pub struct Spec {
    global: Vec<FlagSpec>,
    commands: BTreeMap<String, Vec<FlagSpec>>,
    aliases: BTreeMap<String, String>,
    positional: BTreeMap<String, String>,
    exclusive: BTreeMap<String, Vec<Vec<String>>>,
}

impl Spec {
    pub fn load() -> Spec {
        let doc: Value = serde_json::from_str(FLAGS_JSON).expect("pulumi-flags.json is valid JSON");
        let list = |v: &Value| {
            v.as_array()
                .map(|a| a.iter().map(FlagSpec::from_json).collect())
                .unwrap_or_default()
        };
        let global = list(&doc["global"]);
        let commands = doc["commands"]
            .as_object()
            .expect("commands")
            .iter()
            .map(|(k, v)| (k.clone(), list(v)))
            .collect();
        let mut aliases = BTreeMap::new();
        for (canonical, names) in doc["aliases"].as_object().expect("aliases") {
            for name in names.as_array().expect("alias list") {
                aliases.insert(name.as_str().expect("alias").to_string(), canonical.clone());
            }
        }
        let positional = doc["positional_args"]
            .as_object()
            .expect("positional_args")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect();
        let exclusive = doc["mutually_exclusive"]
            .as_object()
            .expect("mutually_exclusive")
            .iter()
            .map(|(k, groups)| {
                let groups = groups
                    .as_array()
                    .expect("groups")
                    .iter()
                    .map(|g| {
                        g.as_array()
                            .expect("group")
                            .iter()
                            .map(|f| f.as_str().expect("flag").to_string())
                            .collect()
                    })
                    .collect();
                (k.clone(), groups)
            })
            .collect();
        Spec {
            global,
            commands,
            aliases,
            positional,
            exclusive,
        }
    }

    fn is_command(&self, path: &str) -> bool {
        self.commands.contains_key(path) || self.aliases.contains_key(path)
    }

    fn is_command_prefix(&self, path: &str) -> bool {
        let prefix = format!("{path} ");
        self.commands
            .keys()
            .chain(self.aliases.keys())
            .any(|c| c.starts_with(&prefix))
    }
}

/// A parsed command line.
#[derive(Debug, Default)]
pub struct Args {
    /// The canonical command path: `up`, `stack select`, `config set`, …
    pub command: String,
    /// Long flag name → every value given (bools as "true"/"false").
    pub flags: BTreeMap<String, Vec<String>>,
    pub positionals: Vec<String>,
}

impl Args {
    pub fn has(&self, long: &str) -> bool {
        self.flags
            .get(long)
            .and_then(|v| v.last())
            .is_some_and(|v| v != "false")
    }

    pub fn value(&self, long: &str) -> Option<&str> {
        self.flags
            .get(long)
            .and_then(|v| v.last())
            .map(String::as_str)
    }
}

/// A command-line error: the message (without `error: `) and whether to print usage first.
#[derive(Debug)]
pub struct UsageError(pub String);

pub fn parse(
    spec: &Spec,
    argv: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Args, UsageError> {
    // Pass 1: the command path. Before the subcommand only root flags are allowed (cobra's Find).
    let mut path: Vec<String> = Vec::new();
    let mut command_words: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < argv.len() {
        let token = &argv[i];
        if token == "--" {
            break;
        }
        if token.starts_with('-') && token.len() > 1 {
            if !token.contains('=') && takes_separate_value(&spec.global, token) {
                i += 1;
            }
            i += 1;
            continue;
        }
        let candidate = if path.is_empty() {
            token.clone()
        } else {
            format!("{} {token}", path.join(" "))
        };
        if spec.is_command(&candidate) || spec.is_command_prefix(&candidate) {
            path.push(token.clone());
            command_words.push(i);
            i += 1;
            continue;
        }
        break;
    }
    let named = path.join(" ");
    if named.is_empty() {
        return Err(UsageError("the stand-in needs a command".into()));
    }
    let command = spec.aliases.get(&named).cloned().unwrap_or(named);
    let Some(command_flags) = spec.commands.get(&command) else {
        return Err(UsageError(format!(
            "unknown command \"{}\" for \"pulumi\"",
            path.join(" ")
        )));
    };
    let available = |flag: &FlagSpec| match &flag.requires_env {
        Some((key, value)) => env(key).is_some_and(|v| v.eq_ignore_ascii_case(value)),
        None => true,
    };
    let flags: Vec<&FlagSpec> = command_flags
        .iter()
        .chain(&spec.global)
        .filter(|f| available(f))
        .collect();
    let by_long = |name: &str| flags.iter().find(|f| f.long == name).copied();
    let by_short = |c: char| flags.iter().find(|f| f.short == Some(c)).copied();

    // Pass 2: flags and positionals.
    let mut args = Args {
        command: command.clone(),
        ..Args::default()
    };
    let mut i = 0;
    while i < argv.len() {
        if command_words.contains(&i) {
            i += 1;
            continue;
        }
        let token = &argv[i];
        if token == "--" {
            args.positionals.extend(argv[i + 1..].iter().cloned());
            break;
        }
        if let Some(long) = token.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let flag =
                by_long(name).ok_or_else(|| UsageError(format!("unknown flag: --{name}")))?;
            let value = match (flag.takes_value, inline) {
                (_, Some(v)) => v,
                (true, None) => {
                    i += 1;
                    argv.get(i)
                        .cloned()
                        .ok_or_else(|| UsageError(format!("flag needs an argument: --{name}")))?
                }
                (false, None) => flag.no_opt_default.clone().unwrap_or_else(|| "true".into()),
            };
            args.flags.entry(flag.long.clone()).or_default().push(value);
        } else if token.starts_with('-') && token.len() > 1 {
            let shorts: Vec<char> = token[1..].chars().collect();
            let mut k = 0;
            while k < shorts.len() {
                let c = shorts[k];
                let flag = by_short(c).ok_or_else(|| {
                    UsageError(format!("unknown shorthand flag: '{c}' in {token}"))
                })?;
                if flag.takes_value {
                    let rest: String = shorts[k + 1..].iter().collect();
                    let value = if let Some(v) = rest.strip_prefix('=') {
                        v.to_string()
                    } else if !rest.is_empty() {
                        rest
                    } else {
                        i += 1;
                        argv.get(i).cloned().ok_or_else(|| {
                            UsageError(format!("flag needs an argument: '{c}' in -{c}"))
                        })?
                    };
                    args.flags.entry(flag.long.clone()).or_default().push(value);
                    break;
                }
                let rest: String = shorts[k + 1..].iter().collect();
                if let Some(v) = rest.strip_prefix('=') {
                    args.flags
                        .entry(flag.long.clone())
                        .or_default()
                        .push(v.to_string());
                    break;
                }
                let value = flag.no_opt_default.clone().unwrap_or_else(|| "true".into());
                args.flags.entry(flag.long.clone()).or_default().push(value);
                k += 1;
            }
        } else {
            args.positionals.push(token.clone());
        }
        i += 1;
    }
    check_positionals(spec, &command, &args.positionals)?;
    if let Some(groups) = spec.exclusive.get(&command) {
        for group in groups {
            let set: Vec<&String> = group
                .iter()
                .filter(|f| args.flags.contains_key(*f))
                .collect();
            if set.len() > 1 {
                let names: Vec<&str> = set.iter().map(|s| s.as_str()).collect();
                return Err(UsageError(format!(
                    "if any flags in the group [{}] are set none of the others can be; [{}] were all set",
                    group.join(" "),
                    names.join(" ")
                )));
            }
        }
    }
    Ok(args)
}

fn takes_separate_value(flags: &[FlagSpec], token: &str) -> bool {
    if let Some(long) = token.strip_prefix("--") {
        flags.iter().any(|f| f.long == long && f.takes_value)
    } else {
        let shorts: Vec<char> = token[1..].chars().collect();
        shorts.len() == 1
            && flags
                .iter()
                .any(|f| f.short == Some(shorts[0]) && f.takes_value)
    }
}

fn check_positionals(spec: &Spec, command: &str, positionals: &[String]) -> Result<(), UsageError> {
    let rule = spec
        .positional
        .get(command)
        .map(String::as_str)
        .unwrap_or("none");
    let (min, max) = if rule.starts_with("none") {
        (0, Some(0))
    } else if rule.contains("exactly 1") {
        (1, Some(1))
    } else if rule.contains("(0-1") {
        (0, Some(1))
    } else if rule.contains("(1-2") {
        (1, Some(2))
    } else if rule.contains("(1+)") {
        (1, None)
    } else {
        (0, None)
    };
    let n = positionals.len();
    if n < min {
        return Err(UsageError(format!(
            "accepts between {min} and {} arg(s), received {n}",
            max.unwrap_or(min)
        )));
    }
    if let Some(max) = max
        && n > max
    {
        return Err(UsageError(format!(
            "accepts at most {max} arg(s), received {n}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_line(line: &str) -> Result<Args, UsageError> {
        let argv: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        parse(&Spec::load(), &argv, &|_| None)
    }

    #[test]
    fn globals_go_before_the_command_and_flags_anywhere() {
        let args = parse_line("--non-interactive up --yes --skip-preview --stack dev --config-file /c.yaml --color=never").unwrap();
        assert_eq!(args.command, "up");
        assert!(args.has("non-interactive") && args.has("yes") && args.has("skip-preview"));
        assert_eq!(args.value("stack"), Some("dev"));
        assert_eq!(args.value("color"), Some("never"));
        let args = parse_line("-C /tmp stack select -c -sdev").unwrap();
        assert_eq!(
            (
                args.command.as_str(),
                args.value("stack"),
                args.has("create")
            ),
            ("stack select", Some("dev"), true)
        );
        let args = parse_line("config set --secret prometheus:adminpass --stack dev").unwrap();
        assert_eq!(args.positionals, ["prometheus:adminpass"]);
    }

    #[test]
    fn unknown_flags_and_wrong_places_are_refused() {
        assert_eq!(
            parse_line("up --bogus").unwrap_err().0,
            "unknown flag: --bogus"
        );
        assert_eq!(
            parse_line("preview --yes").unwrap_err().0,
            "unknown flag: --yes"
        );
        assert_eq!(
            parse_line("destroy --exclude-dependents").unwrap_err().0,
            "unknown flag: --exclude-dependents"
        );
        assert_eq!(
            parse_line("up -x a").unwrap_err().0,
            "unknown shorthand flag: 'x' in -x"
        );
        assert!(
            parse_line("up --event-log f").is_err(),
            "only with PULUMI_DEBUG_COMMANDS"
        );
        assert!(
            parse_line("stack output a b")
                .unwrap_err()
                .0
                .contains("at most 1")
        );
        assert!(
            parse_line("up --target a --exclude b")
                .unwrap_err()
                .0
                .contains("[target exclude]")
        );
    }

    #[test]
    fn bools_never_take_the_next_word_and_optional_values_need_equals() {
        let args = parse_line("up --yes false").unwrap();
        assert!(args.has("yes"));
        assert_eq!(args.positionals, ["false"]);
        let args = parse_line("up --refresh=false --suppress-permalink").unwrap();
        assert!(!args.has("refresh"));
        assert_eq!(args.value("suppress-permalink"), Some("false"));
        let args = parse_line("stack rm -yf dev").unwrap();
        assert_eq!(args.command, "stack rm");
        assert!(args.has("yes") && args.has("force"));
    }
}
