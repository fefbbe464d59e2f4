//! State as Pulumi's DIY backend keeps it, in a directory (`file://`) or a PostgreSQL table
//! (`postgres://`, `postgres/`), the same objects under the same keys either way (`store.rs`):
//! `.pulumi/meta.yaml` (`version: 1`, written when missing), `.pulumi/stacks/<project>/<stack>.json`
//! checkpoints (the one replaced kept as `<stack>.json.bak`; `stack rm` leaves only the `.bak`),
//! `.pulumi/locks/organization/<project>/<stack>/<id>.json` held while an operation runs, and
//! the stack configuration files, beside the project, with their `secure:` values.
//!
//! Secrets are encoded, not encrypted: `v1:` + base64 of the value XOR-ed with the passphrase. It
//! keeps plaintext out of every file (which is what mara's tests check) and fails on a wrong
//! passphrase as the real passphrase provider does; it is not cryptography.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

use crate::Failure;
use crate::store::{Files, Store, write_atomic};

pub const VERSION: &str = "v3.259.0";
/// How Pulumi marks a secret value inside a checkpoint.
pub const SECRET_SIG: &str = "4dabf18193072939515e22adb298388d";
const SECRET_SIG_VALUE: &str = "1b47061264138c4ac30d75fd1eb44270";
const CHECK: &str = "pulumi";

/// The DIY backend over its store: where each object is, and what the DIY backend does with them.
pub struct Backend {
    store: Box<dyn Store>,
}

const META: &str = ".pulumi/meta.yaml";

impl Backend {
    /// The backend of `PULUMI_BACKEND_URL`: `file://<dir>` or `postgres://…`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>, cwd: &Path) -> Result<Backend, Failure> {
        let url = env("PULUMI_BACKEND_URL").ok_or_else(|| {
            Failure::new(1, "the pulumi stand-in needs PULUMI_BACKEND_URL=file://<dir> or postgres://… (it has no `pulumi login`)")
        })?;
        let store: Box<dyn Store> = if let Some(path) = url.strip_prefix("file://") {
            let root = if path == "~" || path.starts_with("~/") {
                PathBuf::from(env("HOME").unwrap_or_default())
                    .join(path.trim_start_matches('~').trim_start_matches('/'))
            } else {
                cwd.join(path)
            };
            Box::new(Files { root })
        } else if url.starts_with("postgres://") {
            Box::new(crate::postgres::Table::open(&url, env)?)
        } else {
            let url = crate::postgres::url::redacted(&url);
            return Err(Failure::new(
                1,
                format!(
                    "the pulumi stand-in supports file:// and postgres:// backends only, not {url}"
                ),
            ));
        };
        let backend = Backend { store };
        // A new state store is laid out by project (meta version 1), as Pulumi's is.
        if !backend.store.exists(META)? {
            backend.store.write(META, b"version: 1\n")?;
        }
        Ok(backend)
    }

    fn checkpoint_key(project: &str, stack: &str) -> String {
        format!(".pulumi/stacks/{project}/{stack}.json")
    }

    fn lock_dir(project: &str, stack: &str) -> String {
        format!(".pulumi/locks/organization/{project}/{stack}")
    }

    pub fn exists(&self, project: &str, stack: &str) -> Result<bool, Failure> {
        self.store.exists(&Self::checkpoint_key(project, stack))
    }

    pub fn read(&self, project: &str, stack: &str) -> Result<Value, Failure> {
        let key = Self::checkpoint_key(project, stack);
        let bytes = self
            .store
            .read(&key)?
            .ok_or_else(|| Failure::new(6, format!("no stack named '{stack}' found")))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            Failure::new(
                1,
                format!("could not read {}: {e}", self.store.locator(&key)),
            )
        })
    }

    /// Writes the stack's checkpoint, the one it replaces kept as `<stack>.json.bak`.
    pub fn write(&self, project: &str, stack: &str, checkpoint: &Value) -> Result<(), Failure> {
        let key = Self::checkpoint_key(project, stack);
        if self.store.exists(&key)? {
            let _ = self.store.copy(&key, &format!("{key}.bak"));
        }
        let text = serde_json::to_string(checkpoint).expect("JSON");
        self.store.write(&key, text.as_bytes())
    }

    pub fn create(&self, project: &str, stack: &str, salt: &str) -> Result<(), Failure> {
        let checkpoint = json!({
            "version": 3,
            "checkpoint": {
                "stack": format!("organization/{project}/{stack}"),
                "latest": {
                    "manifest": manifest(),
                    "secrets_providers": {"type": "passphrase", "state": {"salt": salt}},
                }
            }
        });
        self.write(project, stack, &checkpoint)
    }

    /// `stack rm`: the checkpoint becomes `<stack>.json.bak`, the stack's history goes.
    pub fn remove(&self, project: &str, stack: &str) -> Result<(), Failure> {
        let key = Self::checkpoint_key(project, stack);
        self.store.rename(&key, &format!("{key}.bak"))?;
        self.store
            .remove_dir(&format!(".pulumi/history/{project}/{stack}"));
        Ok(())
    }

    /// Stacks of `project`, sorted.
    pub fn stacks(&self, project: &str) -> Result<Vec<String>, Failure> {
        let dir = format!(".pulumi/stacks/{project}");
        let mut names: Vec<String> = self
            .store
            .list(&dir)?
            .iter()
            .filter_map(|key| key.rsplit('/').next()?.strip_suffix(".json"))
            .map(str::to_string)
            .collect();
        names.sort();
        Ok(names)
    }

    /// Takes the stack's lock, or fails as the real DIY backend does when another holds it.
    pub fn lock(&self, project: &str, stack: &str) -> Result<Lock<'_>, Failure> {
        let dir = Self::lock_dir(project, stack);
        let id = format!("{:016x}{:08x}", now_nanos(), std::process::id());
        let key = format!("{dir}/{id}.json");
        let content = json!({
            "pid": std::process::id(),
            "username": username(),
            "hostname": hostname(),
            "timestamp": rfc3339_now(),
        });
        self.store.write(
            &key,
            serde_json::to_string(&content).expect("JSON").as_bytes(),
        )?;
        let lock = Lock { backend: self, key };
        let others: Vec<String> = self
            .store
            .list(&dir)?
            .into_iter()
            .filter(|k| k != &lock.key)
            .collect();
        if others.is_empty() {
            return Ok(lock);
        }
        drop(lock);
        Err(Failure::new(1, self.locked_message(&others)))
    }

    fn locked_message(&self, others: &[String]) -> String {
        let mut message = format!(
            "the stack is currently locked by {} lock(s). Either wait for the other process(es) to end or delete the lock file with `pulumi cancel`.",
            others.len()
        );
        for other in others {
            let held: Value = self
                .store
                .read(other)
                .ok()
                .flatten()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                .unwrap_or_default();
            message.push_str(&format!(
                "\n  {}: created by {}@{} (pid {}) at {}",
                self.store.locator(other),
                held["username"].as_str().unwrap_or("?"),
                held["hostname"].as_str().unwrap_or("?"),
                held["pid"],
                held["timestamp"].as_str().unwrap_or("?"),
            ));
        }
        message
    }

    /// `pulumi cancel`: every lock of the stack deleted.
    pub fn cancel(&self, project: &str, stack: &str) -> Result<(), Failure> {
        for key in self.store.list(&Self::lock_dir(project, stack))? {
            let _ = self.store.delete(&key);
        }
        Ok(())
    }

    /// A count the stand-in keeps in the backend (`PULUMI_STAND_IN_FLAKY`), at the backend's root.
    pub fn counter(&self, name: &str) -> Result<u32, Failure> {
        let bytes = self.store.read(name)?.unwrap_or_default();
        Ok(String::from_utf8_lossy(&bytes).trim().parse().unwrap_or(0))
    }

    pub fn set_counter(&self, name: &str, value: u32) -> Result<(), Failure> {
        self.store.write(name, value.to_string().as_bytes())
    }
}

/// A held stack lock, released when dropped.
pub struct Lock<'a> {
    backend: &'a Backend,
    key: String,
}

impl Drop for Lock<'_> {
    fn drop(&mut self) {
        let _ = self.backend.store.delete(&self.key);
    }
}

pub fn manifest() -> Value {
    json!({"time": rfc3339_now(), "magic": "stand-in", "version": VERSION})
}

/// A stack configuration file (`Pulumi.<stack>.yaml`, or `--config-file`): its top-level keys in
/// order, `config:` among them.
pub struct ConfigFile {
    pub path: PathBuf,
    pub top: Map<String, Value>,
}

impl ConfigFile {
    pub fn load(path: &Path) -> Result<ConfigFile, Failure> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(_) => {
                return Ok(ConfigFile {
                    path: path.to_path_buf(),
                    top: Map::new(),
                });
            }
        };
        let value: Option<Value> = if text.trim().is_empty() {
            None
        } else {
            serde_saphyr::from_str(&text)
                .map_err(|e| Failure::new(1, format!("could not read {}: {e}", path.display())))?
        };
        let top = match value {
            Some(Value::Object(map)) => map,
            None | Some(Value::Null) => Map::new(),
            Some(_) => {
                return Err(Failure::new(
                    1,
                    format!("{} is not a mapping", path.display()),
                ));
            }
        };
        Ok(ConfigFile {
            path: path.to_path_buf(),
            top,
        })
    }

    pub fn values(&self) -> Map<String, Value> {
        self.top
            .get("config")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }

    pub fn set(&mut self, key: &str, value: Value) {
        let config = self
            .top
            .entry("config")
            .or_insert_with(|| Value::Object(Map::new()));
        if !config.is_object() {
            *config = Value::Object(Map::new());
        }
        config
            .as_object_mut()
            .expect("an object")
            .insert(key.to_string(), value);
    }

    pub fn remove(&mut self, key: &str) -> bool {
        self.top
            .get_mut("config")
            .and_then(Value::as_object_mut)
            .is_some_and(|c| c.remove(key).is_some())
    }

    pub fn save(&self) -> Result<(), Failure> {
        let text = serde_saphyr::to_string(&Value::Object(self.top.clone())).map_err(|e| {
            Failure::new(1, format!("could not write {}: {e}", self.path.display()))
        })?;
        write_atomic(&self.path, text.as_bytes())
    }
}

/// The passphrase, as the real CLI finds it.
pub fn passphrase(env: &dyn Fn(&str) -> Option<String>) -> Result<String, Failure> {
    if let Some(p) = env("PULUMI_CONFIG_PASSPHRASE") {
        return Ok(p);
    }
    if let Some(file) = env("PULUMI_CONFIG_PASSPHRASE_FILE") {
        return std::fs::read_to_string(&file)
            .map(|t| t.trim().to_string())
            .map_err(|e| Failure::io(Path::new(&file), e));
    }
    Err(Failure::new(
        1,
        "passphrase must be set with PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE environment variables",
    ))
}

fn xor(data: &[u8], passphrase: &str) -> Vec<u8> {
    let key: Vec<u8> = if passphrase.is_empty() {
        vec![0x5a]
    } else {
        passphrase.bytes().collect()
    };
    data.iter()
        .enumerate()
        .map(|(i, b)| b ^ key[i % key.len()] ^ 0x5a)
        .collect()
}

pub fn encrypt(plaintext: &str, passphrase: &str) -> String {
    format!(
        "v1:c3RhbmQtaW4=:{}",
        B64.encode(xor(plaintext.as_bytes(), passphrase))
    )
}

pub fn decrypt(ciphertext: &str, passphrase: &str) -> Result<String, Failure> {
    let encoded = ciphertext.rsplit(':').next().unwrap_or_default();
    let bytes = B64
        .decode(encoded)
        .map_err(|_| Failure::new(1, "failed to decrypt: malformed ciphertext"))?;
    String::from_utf8(xor(&bytes, passphrase)).map_err(|_| Failure::new(1, "incorrect passphrase"))
}

/// `encryptionsalt` for a new stack: it also proves the passphrase later.
pub fn new_salt(passphrase: &str) -> String {
    format!("v1:c2FsdA==:{}", encrypt(CHECK, passphrase))
}

pub fn check_salt(salt: &str, passphrase: &str) -> Result<(), Failure> {
    let ciphertext = salt.splitn(3, ':').nth(2).unwrap_or_default();
    match decrypt(ciphertext, passphrase) {
        Ok(text) if text == CHECK => Ok(()),
        _ => Err(Failure::new(1, "incorrect passphrase")),
    }
}

pub fn secret_value(ciphertext: String) -> Value {
    json!({SECRET_SIG: SECRET_SIG_VALUE, "ciphertext": ciphertext})
}

pub fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

pub fn now_secs_f64() -> f64 {
    now_nanos() as f64 / 1e9
}

pub fn rfc3339_now() -> String {
    let secs = (now_nanos() / 1_000_000_000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn username() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "user".into())
}

pub fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_round_trip_and_never_show_the_plaintext() {
        let c = encrypt("hunter2-secret", "pass");
        assert!(!c.contains("hunter2"));
        assert_eq!(decrypt(&c, "pass").unwrap(), "hunter2-secret");
        let salt = new_salt("pass");
        assert!(check_salt(&salt, "pass").is_ok());
        assert!(check_salt(&salt, "wrong").is_err());
        let empty = encrypt("x", "");
        assert_eq!(decrypt(&empty, "").unwrap(), "x");
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let t = rfc3339_now();
        assert_eq!(t.len(), 20);
        assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T');
    }
}
