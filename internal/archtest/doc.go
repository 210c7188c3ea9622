// Package archtest holds tests that guard tide's architecture: pure decision
// packages do no I/O and read no clock, and every package documents itself.
// It has no code of its own.
package archtest
