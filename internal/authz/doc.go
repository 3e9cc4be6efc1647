// Package authz turns the broker's authorization errors into messages that
// name the ACL a principal lacks.
//
// The runtime knows what it was doing when the broker refused (producing
// to an output topic, initializing a task's transactional producer, joining
// the group); the broker only answers TOPIC_AUTHORIZATION_FAILED and the
// like. Wrap joins the two. It is safe for concurrent use.
package authz
