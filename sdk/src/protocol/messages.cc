#include "protocol/messages.h"

namespace shoal::protocol {
namespace {

// A peer message's typed value (its decoder in peer.cc) as a Body.
template <typename T>
StatusOr<Body> AsBody(StatusOr<T> decoded) {
  if (!decoded.ok()) return decoded.status();
  return Body(std::move(decoded).value());
}

StatusOr<Body> DecodeBody(const wire::Envelope* env) {
  switch (env->message_type()) {
    case MessageKind::Hello: {
      const wire::Hello* h = env->message_as_Hello();
      SHOAL_RETURN_IF_ERROR(CheckString(h->client_name(), "client_name", false));
      SHOAL_RETURN_IF_ERROR(CheckString(h->trainer(), "trainer", false));
      Hello out{StringOrEmpty(h->client_name()), h->num_examples(), StringOrEmpty(h->trainer()), {}, {}};
      if (h->codecs())
        for (const auto* s : *h->codecs())
          if (s && s->size() <= 64) out.codecs.push_back(s->str());
      if (h->features())
        for (const auto* s : *h->features())
          if (s && s->size() <= 64 && out.features.size() < 64) out.features.push_back(s->str());
      return Body(std::move(out));
    }
    case MessageKind::Welcome: {
      SHOAL_ASSIGN_OR_RETURN(WelcomeInfo w, DecodeWelcome(env->message_as_Welcome()));
      return Body(std::move(w));
    }
    case MessageKind::RoundTask: {
      const wire::RoundTask* t = env->message_as_RoundTask();
      SHOAL_RETURN_IF_ERROR(CheckString(t->model_hash(), "model_hash", false));
      SHOAL_RETURN_IF_ERROR(CheckString(t->base_hash(), "base_hash", false));
      RoundTask out;
      auto config = DecodeRoundConfig(t->config(), env->round());
      if (config.ok()) out.config = *config;
      else out.config_error = config.status().message();
      out.deadline_ms = t->deadline_ms();
      out.model_hash = StringOrEmpty(t->model_hash());
      out.encoding = t->encoding();
      out.chunk = ViewChunk(t->payload());
      out.base_hash = StringOrEmpty(t->base_hash());
      out.delta_round = t->delta_round();
      return Body(std::move(out));
    }
    case MessageKind::Update: {
      const wire::Update* u = env->message_as_Update();
      SHOAL_ASSIGN_OR_RETURN(UpdateReport report, DecodeUpdateReport(u));
      return Body(UpdateChunk{u->num_examples(), std::move(report), u->encoding(), ViewChunk(u->payload())});
    }
    case MessageKind::Resync: {
      const wire::Resync* r = env->message_as_Resync();
      SHOAL_RETURN_IF_ERROR(CheckString(r->have_hash(), "have_hash", false));
      return Body(Resync{StringOrEmpty(r->have_hash())});
    }
    case MessageKind::Ack: {
      const wire::Ack* a = env->message_as_Ack();
      if (a->commit_round() < env->round())
        return Status::Protocol("Ack commits the update of round " + std::to_string(env->round()) + " in an earlier round " +
                                std::to_string(a->commit_round()));
      return Body(Ack{a->accepted(), a->commit_round()});
    }
    case MessageKind::Error: {
      const wire::Error* e = env->message_as_Error();
      SHOAL_RETURN_IF_ERROR(CheckString(e->reason(), "reason", false));
      return Body(ErrorReply{e->code(), StringOrEmpty(e->reason())});
    }
    case MessageKind::Heartbeat: {
      const wire::Heartbeat* h = env->message_as_Heartbeat();
      return Body(Heartbeat{h->busy(), h->progress()});
    }
    case MessageKind::Bye: {
      const wire::Bye* b = env->message_as_Bye();
      SHOAL_RETURN_IF_ERROR(CheckString(b->reason(), "reason", false));
      return Body(Bye{StringOrEmpty(b->reason())});
    }
    case MessageKind::Join: return AsBody(DecodeJoin(env->message_as_Join()));
    case MessageKind::Members: return AsBody(DecodeMembers(env->message_as_Members()));
    case MessageKind::PeerUpdate: return AsBody(DecodePeerUpdate(env->message_as_PeerUpdate()));
    case MessageKind::Commit: return AsBody(DecodeCommit(env->message_as_Commit()));
    case MessageKind::StateRequest: return AsBody(DecodeStateRequest(env->message_as_StateRequest()));
    case MessageKind::State: return AsBody(DecodeState(env->message_as_State()));
    case MessageKind::UpdateFetch: return AsBody(DecodeUpdateFetch(env->message_as_UpdateFetch()));
    case MessageKind::RingSegment: return AsBody(DecodeRingSegment(env->message_as_RingSegment()));
    case MessageKind::SecAggKeys: return AsBody(DecodeSecAggKeys(env->message_as_SecAggKeys()));
    case MessageKind::SecAggSetup:
      return AsBody(DecodeSecAggSetup(env->message_as_SecAggSetup(), env->session(), env->round()));
    case MessageKind::SecAggShareKeys: return AsBody(DecodeSecAggShareKeys(env->message_as_SecAggShareKeys()));
    case MessageKind::SecAggShares: return AsBody(DecodeSecAggShares(env->message_as_SecAggShares()));
    case MessageKind::SecAggMasked: return AsBody(DecodeSecAggMasked(env->message_as_SecAggMasked()));
    case MessageKind::SecAggUnmask: return AsBody(DecodeSecAggUnmask(env->message_as_SecAggUnmask()));
    case MessageKind::SecAggUnmaskShares:
      return AsBody(DecodeSecAggUnmaskShares(env->message_as_SecAggUnmaskShares()));
    case MessageKind::SecAggCheckSignature:
      return AsBody(DecodeSecAggCheckSignature(env->message_as_SecAggCheckSignature()));
    case MessageKind::SecAggUnmaskProof:
      return AsBody(DecodeSecAggUnmaskProof(env->message_as_SecAggUnmaskProof()));
    default:  // VerifyFrame lets no other kind through
      return Status::Protocol(std::string("no decoder for message kind ") + MessageName(env->message_type()));
  }
}

}  // namespace

const char* ErrorName(ErrorCode code) { return wire::EnumNameErrorCode(code); }

MessageKind KindOf(const Verified& frame) {
  return frame.envelope ? frame.envelope->message_type() : MessageKind::NONE;
}

Header HeaderOf(const Verified& frame) {
  const wire::Envelope* env = frame.envelope;
  return env ? Header{env->session(), env->round(), env->sender(), env->sequence()} : Header{};
}

StatusOr<Message> DecodeMessage(const Verified& frame) {
  if (!frame.envelope) return Status::Protocol("frame was not verified");
  Message m;
  m.header = HeaderOf(frame);
  m.kind = KindOf(frame);
  SHOAL_ASSIGN_OR_RETURN(m.body, DecodeBody(frame.envelope));
  return m;
}

}  // namespace shoal::protocol
