package protocol

// Approval from Slack: the worker's slack-format notices carry buttons
// with these action ids, whose value is the request id, and the API takes
// Slack's callbacks for them at SlackInteractionsPath.
const (
	// SlackInteractionsPath is where Slack posts its interaction
	// callbacks (the Slack app's Request URL).
	SlackInteractionsPath = "/slack/interactions"
	// SlackActionApprove and SlackActionDecline are the buttons that
	// decide in Slack.
	SlackActionApprove = "tollgate_approve"
	SlackActionDecline = "tollgate_decline"
	// SlackActionLinkApprove and SlackActionLinkDecline are the buttons
	// that open the signed links' pages. Slack sends a callback for them
	// too, which decides nothing.
	SlackActionLinkApprove = "tollgate_link_approve"
	SlackActionLinkDecline = "tollgate_link_decline"
)
