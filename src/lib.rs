//! mara: deploy a platform made of many small Pulumi projects as one unit.
//!
//! The data flows one way: command line (`cli`) → settings (`settings`) → workspace files
//! (`workspace`) and providers (`provider`) → the execution graph (`graph`) → the commands
//! (`commands`), which alone print, through `ui`. `docs/ARCHITECTURE.md` describes each module.

pub mod cli;
pub mod commands;
pub mod configure;
pub mod engine;
pub mod error;
pub mod fingerprint;
pub mod graph;
pub mod ledger;
pub mod parallel;
pub mod provider;
pub mod run;
pub mod settings;
pub mod ui;
pub mod workspace;
