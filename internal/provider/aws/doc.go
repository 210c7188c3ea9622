// Package aws is tide's Amazon EC2 provider (issue 18), on aws-sdk-go-v2.
//
// Machines are EC2 instances launched with CreateFleet (type instant) from a
// launch template the configuration names or that tide creates (AMI, security
// groups, instance profile, and user data: the worker bootstrap the caller
// hands over, so an instance joins the head by itself).
//
// # State lives in EC2 tags
//
// Every instance carries the tags tide:owner (the installation), tide:pool,
// tide:machine-id, tide:offering, tide:controller and tide:epoch (the fence of
// the call that launched it), and the machine's labels as tide-label:KEY.
// Create passes a ClientToken derived from the machine id, and before it
// launches it looks the machine id up by tag, so a retried Create never
// launches twice even where the ClientToken is not honoured (moto); List and
// Get read by tag, so a restarted controller adopts what it launched.
// Configure and Drain are tide-level: the worker's bootstrap is in the user
// data, and the cluster binding is recorded in the tags tide:cluster and
// tide:bound.
//
// # User data: each machine's own bootstrap
//
// An instance starts its worker by itself (JoinsAtCreate): the caller (the
// assembly's joining wrapper) mints the machine's credential before Create
// and passes the blob in CreateRequest.Bootstrap. Create renders it as the
// cloud-init of `tide bootstrap --format cloud-init` (WorkerDataDir,
// TideBinary) and, since CreateFleet takes user data from the launch
// template only, launches from a version of the template made for that
// machine (the pool's template's image, security groups, key and instance
// profile, SourceVersion its default version), deleted once the instance
// exists. A Create without a bootstrap uses the template as it is.
//
// # Mapping to the machine model
//
//	pending                      → Creating
//	running                      → Idle, or Configured when tide:cluster is set
//	shutting-down, or terminated while this process still waits → Deleting
//	terminated, or no instance   → gone (NotFound)
//	stopping, stopped            → Failed
//
// Delete terminates the instance and the machine stays Deleting until Sync
// (called by Run's loop, or by a test) has seen the instance terminated.
//
// # Errors
//
// InsufficientInstanceCapacity, Unsupported and their kin (as API errors or
// in CreateFleet's per-override errors) become InsufficientCapacityError;
// instance, vCPU and spot-count limits become QuotaExceededError; throttling
// is retried with backoff by the SDK's retryer and, when it persists, becomes
// TransientError. Every call runs under Config.CallTimeout.
//
// # Spot interruptions
//
// With Config.Interruptions set, the provider reads EC2 Spot Instance
// Interruption Warnings from an SQS queue fed by an EventBridge rule (it can
// create both) and turns each into the machine's ReclaimAt.
package aws
