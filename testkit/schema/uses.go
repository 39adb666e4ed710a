package schema

import (
	cp "github.com/meshweaver/supervisor/codexproto"
)

// DaemonUses is what the daemon exchanges with the app-server, with the
// codexproto types it writes and reads: every Method*, Note* and Req*
// constant of codexproto has its row (TestDaemonUsesComplete), and its
// rows are exactly the messages Decisions calls used
// (TestDecisionsUsedAreDaemonUses). Compare checks a new CLI's bundle
// against it.
func DaemonUses() []Use {
	return []Use{
		// Client requests: the params the daemon sends, the results it reads.
		{Kind: ClientRequest, Method: cp.MethodInitialize, Sends: cp.InitializeParams{}, Reads: []any{cp.InitializeResult{}}},
		{Kind: ClientRequest, Method: cp.MethodThreadStart, Sends: cp.ThreadStartParams{}, Reads: []any{cp.ThreadResult{}}},
		{Kind: ClientRequest, Method: cp.MethodThreadResume, Sends: cp.ThreadResumeParams{}, Reads: []any{cp.ThreadResult{}}},
		{Kind: ClientRequest, Method: cp.MethodThreadNameSet, Sends: cp.ThreadNameSetParams{}},
		{Kind: ClientRequest, Method: cp.MethodThreadRead, Sends: cp.ThreadReadParams{}, Reads: []any{cp.ThreadResult{}, cp.ThreadReadResult{}}},
		// Client.ThreadUnsubscribe sends ThreadReadParams with the thread
		// id only; IncludeTurns stays false and so out of the line.
		{Kind: ClientRequest, Method: cp.MethodThreadUnsub, Sends: cp.ThreadIDParams{}},
		{Kind: ClientRequest, Method: cp.MethodThreadLoadedList, Sends: struct{}{}},
		{Kind: ClientRequest, Method: cp.MethodTurnStart, Sends: cp.TurnStartSurfaceParams{}, Reads: []any{cp.TurnResult{}}},
		{Kind: ClientRequest, Method: cp.MethodTurnInterrupt, Sends: cp.TurnInterruptParams{}},
		{Kind: ClientRequest, Method: cp.MethodTurnSteer, Sends: cp.TurnSteerParams{}, Reads: []any{cp.TurnSteerResult{}}},
		{Kind: ClientRequest, Method: cp.MethodModelList, Sends: cp.ModelListParams{}, Reads: []any{cp.ModelListResult{}}},
		{Kind: ClientRequest, Method: cp.MethodAccountRead, Sends: struct{}{}, Reads: []any{cp.AccountReadResult{}}},
		{Kind: ClientRequest, Method: cp.MethodRateLimitsRead, Reads: []any{cp.RateLimitsResult{}}},
		{Kind: ClientRequest, Method: cp.MethodLoginStart, Sends: cp.LoginStartParams{}, Reads: []any{cp.LoginStartResult{}}},
		{Kind: ClientRequest, Method: cp.MethodLoginCancel, Sends: cp.LoginCancelParams{}, Reads: []any{cp.LoginCancelResult{}}},
		{Kind: ClientRequest, Method: cp.MethodLogout},
		{Kind: ClientRequest, Method: cp.MethodThreadList, Sends: cp.ThreadListParams{}, Reads: []any{cp.ThreadListResult{}}},
		{Kind: ClientRequest, Method: cp.MethodThreadArchive, Sends: cp.ThreadIDParams{}},
		{Kind: ClientRequest, Method: cp.MethodThreadFork, Sends: cp.ThreadForkParams{}, Reads: []any{cp.ThreadResult{}}},
		{Kind: ClientRequest, Method: cp.MethodThreadCompactStart, Sends: cp.ThreadIDParams{}},
		// CodexRequest passes these on as they are (params and result as
		// JSON text: the caller's).
		{Kind: ClientRequest, Method: cp.MethodMCPStatusList},
		{Kind: ClientRequest, Method: cp.MethodMCPReload},
		{Kind: ClientRequest, Method: cp.MethodConfigRead},
		{Kind: ClientRequest, Method: cp.MethodConfigRequirementsRead},
		// serve --check's probe runs one command in the CLI's sandbox.
		{Kind: ClientRequest, Method: cp.MethodCommandExec, Sends: cp.CommandExecParams{}, Reads: []any{cp.CommandExecResult{}}},
		{Kind: ClientNotification, Method: cp.MethodInitialized},

		// Server notifications: the params the daemon reads.
		{Kind: ServerNotification, Method: cp.NoteAgentMessageDelta, Reads: []any{cp.Delta{}}},
		{Kind: ServerNotification, Method: cp.NoteReasoningSummary, Reads: []any{cp.Delta{}}},
		{Kind: ServerNotification, Method: cp.NoteReasoningText, Reads: []any{cp.Delta{}}},
		{Kind: ServerNotification, Method: cp.NoteItemStarted, Reads: []any{cp.ItemNotification{}, cp.SurfaceItemNotification{}}},
		{Kind: ServerNotification, Method: cp.NoteItemCompleted, Reads: []any{cp.ItemNotification{}, cp.SurfaceItemNotification{}}},
		{Kind: ServerNotification, Method: cp.NoteTokenUsage, Reads: []any{cp.TokenUsageNotification{}}},
		{Kind: ServerNotification, Method: cp.NoteError, Reads: []any{cp.ErrorNotification{}}},
		{Kind: ServerNotification, Method: cp.NoteTurnStarted, Reads: []any{cp.TurnNotification{}}},
		{Kind: ServerNotification, Method: cp.NoteTurnCompleted, Reads: []any{cp.TurnNotification{}}},
		{Kind: ServerNotification, Method: cp.NoteModelRerouted, Reads: []any{cp.ModelRerouted{}}},
		{Kind: ServerNotification, Method: cp.NoteMCPStartupStatus, Reads: []any{cp.MCPStartupStatus{}}},
		{Kind: ServerNotification, Method: cp.NoteLoginCompleted, Reads: []any{cp.LoginCompleted{}}},
		{Kind: ServerNotification, Method: cp.NoteAccountUpdated},      // the method alone
		{Kind: ServerNotification, Method: cp.NoteServerRequestSolved}, // the method alone
		{Kind: ServerNotification, Method: cp.NoteTurnDiff, Reads: []any{cp.TurnDiff{}}},
		{Kind: ServerNotification, Method: cp.NoteCommandOutputDelta, Reads: []any{cp.Delta{}}},
		{Kind: ServerNotification, Method: cp.NoteThreadStarted, Reads: []any{cp.ThreadStarted{}}},
		{Kind: ServerNotification, Method: cp.NoteRateLimitsUpdated, Reads: []any{cp.RateLimitsUpdated{}}},
		{Kind: ServerNotification, Method: cp.NoteThreadSettings, Reads: []any{cp.ThreadSettingsUpdated{}}},

		// Server requests: the params the daemon reads, the answer it sends.
		{Kind: ServerRequest, Method: cp.ReqCommandApproval, Reads: []any{cp.ApprovalParams{}}, Sends: cp.ApprovalAnswer{}},
		{Kind: ServerRequest, Method: cp.ReqFileChangeApproval, Reads: []any{cp.ApprovalParams{}}, Sends: cp.ApprovalAnswer{}},
		{Kind: ServerRequest, Method: cp.ReqUserInput, Reads: []any{cp.UserInputParams{}}, Sends: cp.UserInputAnswer{}},
		{Kind: ServerRequest, Method: cp.ReqElicitation, Reads: []any{cp.ElicitationParams{}}, Sends: cp.ElicitationAnswer{}},
		{Kind: ServerRequest, Method: cp.ReqPermissions, Reads: []any{cp.PermissionsParams{}}, Sends: cp.PermissionsAnswer{}},
		{Kind: ServerRequest, Method: cp.ReqToolCall, Reads: []any{cp.DynamicToolCallParams{}}, Sends: cp.DynamicToolCallAnswer{}},
	}
}
