"""allauth glue: the username is the e-mail address, lowercased (one person, one name)."""

from __future__ import annotations

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter


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


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def populate_user(self, request, sociallogin, data):
        user = super().populate_user(request, sociallogin, data)
        _username_from_email(user)
        return user
