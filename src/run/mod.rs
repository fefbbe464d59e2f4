//! Running a plan: the scheduler, the engine processes, and what each project ended as.

pub mod clock;
pub mod process;
pub mod scheduler;
