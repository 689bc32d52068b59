//! The course and the learner's state: the repository and its chapters ([`app_state`]),
//! `chapter.toml` ([`chapter`]), the chapter crates carried in the binary ([`embedded`]), each
//! exercise's last result ([`progress`]) and what the learner's commands share ([`learner`]).

pub mod app_state;
pub mod chapter;
pub mod embedded;
pub mod learner;
pub mod lock;
pub mod progress;
