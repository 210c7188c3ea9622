// Package procinfo identifies processes across restarts of the program that
// started them: a pid alone can be reused, so a process is recorded with its
// start time and the kernel's boot id, and recognised later only if both
// still match. Linux reads /proc; elsewhere only the pid can be checked.
package procinfo
