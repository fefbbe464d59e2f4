//! The commands: each loads what it needs through `deployment` and the layers below, then prints.
//! Only this module, `main` and `ui` know about terminals.

pub mod ci;
pub mod cluster;
pub mod config;
pub mod init;
pub mod ledger;
pub mod list_providers;
pub mod output;
pub mod policy;
pub mod run;
pub mod serve;
pub mod show_execution;
pub mod state;
pub mod validate;
