// What a client enforces of the aggregator's task, whatever the aggregator says
// (ClientPrivacyPolicy in shoal/client.h; docs/SECURITY.md, "What a client enforces"). Chosen
// once, at Start: the checks here run at each Welcome, and the secure-aggregation state machine
// holds the rest (privacy::secagg::ClientPolicy) for every round's Setup.
#pragma once

#include "privacy/secagg/protocol.h"
#include "protocol/federated.h"
#include "shoal/client.h"

namespace shoal::runtime {

// The policy's own values (ValidateClientOptions): finite, in range, a trusted roster that
// loads and a key file to go with it. The error names the shoal-client flag.
Status ValidatePrivacyPolicy(const ClientOptions& options);

// Whether a task's privacy meets the policy; the error names the setting it misses (the
// shoal-client flag) and what the aggregator offered.
Status CheckTaskPrivacy(const ClientPrivacyPolicy& policy, const protocol::PrivacyConfig& task);

// The secure-aggregation state machine's policy, with the trusted roster's keys loaded.
StatusOr<privacy::secagg::ClientPolicy> SecAggPolicy(const ClientPrivacyPolicy& policy);

}  // namespace shoal::runtime
