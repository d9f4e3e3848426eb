// The task table (model spec, layout, optimizer, codecs, standardization) that a Welcome
// (federated.h) and a peer swarm's Members (peer.h) both carry: its encoder and its checked
// decoder (every bound from limits.h, so a hostile task cannot make a client allocate
// without limit).
#pragma once

#include "protocol/frame.h"
#include "shoal/trainer.h"

namespace shoal::protocol {

flatbuffers::Offset<wire::TaskConfig> BuildTask(flatbuffers::FlatBufferBuilder& fbb, const TaskConfig& t);
// InvalidArgument/Protocol with a reason fit for an Error reply.
StatusOr<TaskConfig> DecodeTask(const wire::TaskConfig* t);

}  // namespace shoal::protocol
