package handlers

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/models"
	"atelier/views"
)

// Users is the site admins' page of people.
type Users struct {
	Render *views.Renderer
	Auth   *auth.Service
	Store  *models.Store
}

type usersView struct {
	Users   []models.User
	Created string
	Problem *views.Problem
}

func (v usersView) JSON() any {
	if v.Problem != nil {
		return v.Problem
	}
	return v.Users
}

// List shows every user and the form to add one.
func (h *Users) List(c *gin.Context) error {
	return h.render(c, http.StatusOK, usersView{Created: c.Query("created")})
}

// Create adds a person.
func (h *Users) Create(c *gin.Context) error {
	name := c.PostForm("username")
	u, err := h.Auth.CreateUser(c.Request.Context(), name, c.PostForm("password"), c.PostForm("admin") == "true")
	if err != nil {
		p := ProblemOf(err)
		if p.Status >= 500 {
			return err
		}
		return h.render(c, p.Status, usersView{Problem: p})
	}
	if views.WantsJSON(c.Request) {
		c.JSON(http.StatusCreated, u)
		return nil
	}
	views.Redirect(c, views.URL("/admin/users").Query("created", u.Username).String())
	return nil
}

func (h *Users) render(c *gin.Context, status int, v usersView) error {
	users, err := h.Store.Users(c.Request.Context())
	if err != nil {
		return err
	}
	v.Users = users
	return h.Render.Render(c, status, "users", v)
}
