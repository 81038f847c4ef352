//! The one integration-test binary: each area of bork-ci has a module here.
mod sandbox;
mod verify;
