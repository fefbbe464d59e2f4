//! mara: deploy a platform made of many small Pulumi projects as one unit.
//!
//! The data flows one way: command line (`cli`) → settings (`settings`) → the deployment
//! (`deployment`: workspace files, provider, graph) → the run plan and the runner (`run`, driving
//! each `engine`) → events → sinks (`ui`'s reporter, the `ledger`'s recorder). Only `commands` and
//! `ui` print. `docs/ARCHITECTURE.md` describes each module.

// No function of mara's past 80 lines (`clippy.toml`): one that grows is split along its steps
// before the feature goes in. Tests may keep long tables.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod cli;
pub mod clock;
pub mod cluster;
pub mod commands;
pub mod configure;
pub mod deployment;
pub mod engine;
pub mod error;
pub mod files;
pub mod fingerprint;
pub mod graph;
pub mod ledger;
pub mod parallel;
pub mod policy;
pub mod provider;
pub mod run;
pub mod settings;
pub mod status;
pub mod style;
pub mod ui;
pub mod workspace;
