// Package mockmodel is the demo model (package demomodel) under the name the
// tests of actors/ import: every identifier here is demomodel's, the types
// aliases and the functions forwarders, so values pass between the two.
//
// New code imports demomodel; this package goes once no test imports it.
package mockmodel
