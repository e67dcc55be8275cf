// Package workflows knows Temporal and the approval protocol: the ChatTurn
// and Conversation workflows, the approval gate and the event log. The
// names clients use (workflows, signals, queries, updates, search
// attributes, workflow IDs) and the bodies they send and read are in
// package contract, which links none of what the workflows run.
package workflows
