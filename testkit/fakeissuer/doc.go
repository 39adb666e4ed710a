// Package fakeissuer is a loopback fake of the ChatGPT auth issuer, made to
// answer a real `codex app-server` (codex-cli 0.169.0) through a whole
// device-code login without the network.
//
// Point the CLI at it with CODEX_APP_SERVER_LOGIN_ISSUER=<Issuer.URL> in the
// app-server's environment (and, for logout,
// CODEX_REVOKE_TOKEN_URL_OVERRIDE=<Issuer.RevokeURL()>). It answers what
// /work/shared/codex-protocol/DEVICE-LOGIN.md measured:
//
//   - POST /api/accounts/deviceauth/usercode: 200
//     {"device_auth_id","user_code","interval":"1"} (interval a JSON string),
//     a fresh device code each time, pending.
//   - POST /api/accounts/deviceauth/token {"device_auth_id","user_code"}:
//     403 while the code is pending; once [Issuer.Approve]d, 200
//     {"authorization_code","code_challenge","code_verifier"}; once
//     [Issuer.Deny]d, Options.DenyStatus (400 by default), which ends the
//     CLI's login with "device auth failed with status …".
//   - POST /oauth/token (form, grant_type=authorization_code with the code
//     and verifier handed out above, or grant_type=refresh_token): 200
//     {"id_token","access_token","refresh_token"} whose tokens are unsigned
//     JWTs (alg "none", a non-empty dummy signature) carrying email and, under
//     "https://api.openai.com/auth", chatgpt_plan_type and chatgpt_user_id.
//     They never carry chatgpt_account_id: with it the CLI goes on to a
//     workspace-routing call the fake cannot answer (see DEVICE-LOGIN.md).
//   - POST /oauth/revoke: 200 {} (the CLI's logout sends JSON
//     {"token","token_type_hint":"refresh_token","client_id"}).
//
// Everything else gets 404 (or 405 for a wrong method). Every request is
// recorded as a [Request] with the status it got; [Issuer.Wait],
// [Issuer.WaitPolls] and [Issuer.WaitUserCodes] block on those events
// without sleeping. [Issuer.Close] stops the listener and joins every
// handler. Malformed input gets a 4xx answer, never a panic.
//
// The package does not import "testing", so non-test code may embed it.
package fakeissuer
