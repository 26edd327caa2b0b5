"""allauth glue: the username is the e-mail address, lowercased (one person, one name);
and the account-takeover rules of SPEC §2:

- linking a social login to an existing account by e-mail needs the address verified
  on both sides (the provider's and ours), else a squatter who signed up unverified with
  someone's address would be handed their social login;
- a password reset (or change) and a social takeover revoke the account's personal CLI
  tokens, so whoever held the account before keeps no way in.
"""

from __future__ import annotations

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.models import EmailAddress
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter

from apps.core.clientip import request_ip
from apps.devices.services import personal_tokens_revoke_all


def _username_from_email(user) -> None:
    email = (user.email or "").strip().lower()
    if email:
        user.email = email
        user.username = email[:150]


class AccountAdapter(DefaultAccountAdapter):
    def populate_username(self, request, user) -> None:
        _username_from_email(user)
        if not user.username:
            super().populate_username(request, user)

    def clean_email(self, email: str) -> str:
        return super().clean_email(email).strip().lower()

    def get_client_ip(self, request) -> str:
        """Sign-in throttles count per client address, read the one way Retasc reads it
        (X-Forwarded-For only from RETASC_TRUSTED_PROXIES)."""
        return request_ip(request) or super().get_client_ip(request)

    def set_password(self, user, password: str) -> None:
        """Every password set through allauth (reset by e-mail, change) ends the personal
        tokens: a reset is how the owner of the mailbox takes an account back."""
        super().set_password(user, password)
        personal_tokens_revoke_all(user=user)


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def populate_user(self, request, sociallogin, data):
        user = super().populate_user(request, sociallogin, data)
        _username_from_email(user)
        return user

    def authenticate_by_email(self, sociallogin):
        """allauth already requires the provider to vouch for the address; require our
        side verified too, else no auto-connect (the person signs in another way and
        verifies the address first)."""
        found = super().authenticate_by_email(sociallogin)
        if found is None:
            return None
        user, email = found
        if not EmailAddress.objects.filter(user_id=user.pk, email__iexact=email, verified=True).exists():
            return None
        return found

    def pre_social_login(self, request, sociallogin) -> None:
        """A social login that took over an existing account by e-mail (allauth marks it
        in ``_did_authenticate_by_email``, set by ``lookup()`` just before this hook)
        revokes that account's personal tokens."""
        super().pre_social_login(request, sociallogin)
        if getattr(sociallogin, "_did_authenticate_by_email", None) and sociallogin.user and sociallogin.user.pk:
            personal_tokens_revoke_all(user=sociallogin.user)
