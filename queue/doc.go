// Package queue runs pmjail's jobs from a NATS JetStream work-queue
// stream: a worker (Worker) pulls a job of a tenant its Executor (the
// daemon, under the same ceilings, tenants and slots as its socket's
// jobs) can start now, from that tenant's consumer, has it run, stores the result in a JetStream key-value bucket under the
// job's id, publishes it on a subject, and acks only then. A job whose
// result is already stored is acked without running: a redelivery after
// a worker died, or a job submitted twice, runs once. Client submits jobs
// and waits on their results, for `pmjail submit --nats` and Go programs.
//
// The subject of a job names its tenant (Config.Subject + "." + tenant):
// NATS's own permissions decide which user or account may publish to
// which tenant's subject, so a tenant is a NATS identity, checked by the
// NATS server before a job reaches any worker.
package queue
